//! Bad servers and faults mid-run, against real redis-server processes: a clear message, the
//! documented exit status, no hang, every measured result kept, nothing leaked.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{Exited, TestServer, exits_with, probe_cmd, probe_writes, read_csv, read_json};
use predicates::prelude::*;

fn probe_bin() -> &'static str {
    env!("CARGO_BIN_EXE_probe")
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child we started.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// `spawn` for a run a test watches from outside: its stdout dropped, its stderr kept in a pipe
/// for `stderr_of`.
trait SpawnQuiet {
    fn spawn_quiet(&mut self) -> std::process::Child;
}

impl SpawnQuiet for Command {
    fn spawn_quiet(&mut self) -> std::process::Child {
        self.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// All a child wrote on its piped stderr, read to its end.
fn stderr_of(child: &mut std::process::Child) -> String {
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    stderr
}

/// Waits for a child with a deadline; panics (after killing it) when it hangs.
fn wait_within(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("probe did not stop within {limit:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigint_keeps_results_stops_the_embedded_server_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut child = Command::new(probe_bin())
        .args([
            "--writer-sizes",
            "8M",
            "--repeat",
            "50",
            "--gap",
            "100ms",
            "--out",
        ])
        .arg(&out)
        .spawn_quiet();
    thread::sleep(Duration::from_millis(1500));
    let sent = Instant::now();
    signal(child.id(), libc::SIGINT);
    let status = wait_within(&mut child, Duration::from_secs(10));
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "took {:?}",
        sent.elapsed()
    );
    assert_eq!(status.code(), Some(130));
    let run = read_json(&out.join("run.json"));
    assert_eq!(run["status"], "interrupted");
    let writes = read_csv(&out.join("writes.csv"));
    assert!(
        !writes.is_empty() && writes.len() < 100,
        "{} writes",
        writes.len()
    );
    assert_eq!(read_csv(&out.join("summary.csv")).len(), writes.len());
    assert!(read_csv(&out.join("probes.csv")).len() > 1000);
    // The server the tool started is gone.
    let address = run["server"]["address"].as_str().unwrap().to_string();
    assert!(
        std::net::TcpStream::connect(&address).is_err(),
        "the embedded server at {address} still answers"
    );
}

/// A collection's build stops sending at Ctrl-C (a 2M-field build went on for 4 s after it):
/// the run ends within a second or two, the build recorded as cut short.
#[test]
fn sigint_during_a_build_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut child = Command::new(probe_bin())
        .args(["--type", "hash", "--elements", "4M", "--out"])
        .arg(&out)
        .spawn_quiet();
    // The first op begins after a 500 ms quiet gap; a 4M-field build takes seconds.
    thread::sleep(Duration::from_millis(1500));
    let sent = Instant::now();
    signal(child.id(), libc::SIGINT);
    let status = wait_within(&mut child, Duration::from_secs(30));
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "took {:?}",
        sent.elapsed()
    );
    assert_eq!(status.code(), Some(130));
    let writes = read_csv(&out.join("writes.csv"));
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0]["op"], "build");
    assert_eq!(writes[0]["ok"], "false", "{:?}", writes[0]);
    assert!(
        writes[0]["error"].contains("stopped during the build"),
        "{:?}",
        writes[0]
    );
}

#[test]
fn sigterm_against_an_external_server_cleans_its_keys() {
    let server = TestServer::start(&[]);
    let mut child = Command::new(probe_bin())
        .args([
            "--url",
            &server.url(),
            "--writer-sizes",
            "4M",
            "--repeat",
            "50",
            "--keep",
        ])
        .args(["--gap", "50ms"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(1200));
    assert!(
        !server.keys("holprobe:*").is_empty(),
        "the run should hold keys by now"
    );
    signal(child.id(), libc::SIGTERM);
    let status = wait_within(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(130));
    assert!(
        server.keys("holprobe:*").is_empty(),
        "{:?}",
        server.keys("*")
    );
}

#[test]
fn a_server_killed_mid_run_fails_the_run_quickly_and_keeps_results() {
    let mut server = TestServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(probe_bin())
        .args([
            "--url",
            &server.url(),
            "--writer-sizes",
            "16M",
            "--repeat",
            "50",
        ])
        .args(["--gap", "100ms", "--out"])
        .arg(dir.path())
        .spawn_quiet();
    thread::sleep(Duration::from_millis(1500));
    let killed = Instant::now();
    signal(server.server.pid().unwrap(), libc::SIGKILL);
    let status = wait_within(&mut child, Duration::from_secs(10));
    assert!(
        killed.elapsed() < Duration::from_secs(2),
        "took {:?}",
        killed.elapsed()
    );
    assert_eq!(status.code(), Some(1));
    let stderr = stderr_of(&mut child);
    assert!(stderr.contains("error:"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let run = read_json(&dir.path().join("run.json"));
    assert_eq!(run["status"], "failed");
    assert!(
        run["status_reason"]
            .as_str()
            .unwrap()
            .contains("lost the server")
    );
    assert!(!read_csv(&dir.path().join("writes.csv")).is_empty());
    server.server.stop();
}

/// `probe load` with no writer, its server killed: it ran out its --duration with no request
/// answered and wrote run.json `complete` (the hostile trial). Connections that cannot be
/// reopened for a second end it, `failed`, with what was measured kept.
#[test]
fn a_server_killed_under_load_fails_the_load_run_quickly() {
    let mut server = TestServer::start(&[]);
    Command::new(probe_bin())
        .args(["populate", "--url", &server.url(), "--keys", "1000"])
        .output()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(probe_bin())
        .args(["load", "--url", &server.url(), "--clients", "4"])
        .args(["--duration", "30s", "--out"])
        .arg(dir.path())
        .spawn_quiet();
    thread::sleep(Duration::from_millis(1500));
    let killed = Instant::now();
    signal(server.server.pid().unwrap(), libc::SIGKILL);
    let status = wait_within(&mut child, Duration::from_secs(20));
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "took {:?}",
        killed.elapsed()
    );
    let stderr = stderr_of(&mut child);
    assert_eq!(status.code(), Some(1), "{stderr}");
    let run = read_json(&dir.path().join("run.json"));
    assert_eq!(run["status"], "failed", "{run}");
    let reason = run["status_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("lost redis://127.0.0.1"), "{reason}");
    // The load's length ends when the server went (killed 1.5 s in), not when that was known.
    let runtime = run["runtime_s"].as_f64().unwrap();
    assert!((1.0..2.4).contains(&runtime), "runtime {runtime} s");
    server.server.stop();
}

#[test]
fn an_unresponsive_server_ends_the_run_after_the_timeout() {
    let server = TestServer::start(&[]);
    let sleeper = server.command_after::<()>(
        Duration::from_millis(800),
        redis::cmd("DEBUG").arg("SLEEP").arg("4"),
    );
    let started = Instant::now();
    probe_cmd()
        .args([
            "--url",
            &server.url(),
            "--duration",
            "20s",
            "--timeout",
            "1s",
        ])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "did not answer a probe within --timeout",
        ));
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "took {:?}",
        started.elapsed()
    );
    // The DEBUG SLEEP's own reply may come after the run has gone: only the thread must end.
    let _ = sleeper.join().unwrap();
}

/// A stall still under way when `--duration` ends is said, with how long its oldest probe had
/// waited, and kept in run.json's warnings: "stalls over 1ms: 0" alone read as a quiet server
/// while a 3 s DEBUG SLEEP was a second old (the hostile trial).
#[test]
fn a_stall_under_way_at_the_end_is_said() {
    let server = TestServer::start(&[]);
    let sleeper = server.command_after::<()>(
        Duration::from_millis(1200),
        redis::cmd("DEBUG").arg("SLEEP").arg("3"),
    );
    let dir = tempfile::tempdir().unwrap();
    let out = probe_cmd()
        .args([
            "--url",
            &server.url(),
            "--duration",
            "2s",
            "--report-every",
            "0",
        ])
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let said = stderr
        .lines()
        .find(|l| l.contains("a stall of at least that long was under way at the end"))
        .unwrap_or_else(|| panic!("{stderr}"));
    // The sleep began at most 2 s into the run; its oldest probe had waited 0.2 s or more.
    let waited_ms: f64 = said
        .split("the oldest sent ")
        .nth(1)
        .and_then(|rest| rest.split(" ms").next())
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert!(waited_ms >= 200.0, "{said}");
    let run = read_json(&dir.path().join("run.json"));
    assert!(
        run["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("under way at the end")),
        "{run}"
    );
    let _ = sleeper.join().unwrap();
}

#[test]
fn closing_stdout_ends_the_run_quietly() {
    let mut child = Command::new(probe_bin())
        .args(["--writer-sizes", "1M", "--repeat", "100", "--gap", "50ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("time (UTC)"), "the header: {first}");
    // The reader is gone (like `| head -1`): the next line hits a closed pipe.
    let status = wait_within(&mut child, Duration::from_secs(10));
    let stderr = stderr_of(&mut child);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("error:"), "{stderr}");
    assert_ne!(status.code(), Some(0));
}

/// `probe ... 2>&1 | head -1`: stderr on the closed pipe too. Writing a note there panicked
/// (exit 101) and could leave --out without run.json (the hostile trial); it now stops the run
/// as a closed stdout does, with exit 130 and the files whole.
#[test]
fn closing_a_pipe_shared_by_stdout_and_stderr_ends_the_run_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(probe_bin())
        .args([
            "--writer-sizes",
            "1M",
            "--repeat",
            "100",
            "--gap",
            "50ms",
            "--out",
        ])
        .arg(dir.path())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(reader).read_line(&mut first).unwrap();
    assert!(!first.is_empty());
    // The reader is dropped here: the next note on stderr hits a closed pipe.
    let status = wait_within(&mut child, Duration::from_secs(20));
    assert_eq!(status.code(), Some(130), "after the first line {first:?}");
    let run = read_json(&dir.path().join("run.json"));
    assert_eq!(run["status"], "interrupted", "{run}");
}

#[test]
fn password_problems_are_named_and_the_password_never_printed() {
    let server = TestServer::start(&["requirepass sekrit-pass"]);
    let url = format!("redis://127.0.0.1:{}", server.port());
    probe_cmd()
        .args(["--url", &url, "--duration", "1s"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("NOAUTH"))
        .stderr(predicate::str::contains("REDISCLI_AUTH"));
    probe_cmd()
        .args([
            "--url",
            &format!("redis://:wrong-pass@127.0.0.1:{}", server.port()),
        ])
        .args(["--duration", "1s"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("refused"))
        .stderr(predicate::str::contains("wrong-pass").not());
    let dir = tempfile::tempdir().unwrap();
    let assert = probe_writes(&url, "1M")
        .env("REDISCLI_AUTH", "sekrit-pass")
        .arg("--out")
        .arg(dir.path())
        .assert()
        .success();
    let output = assert.get_output();
    assert!(!String::from_utf8_lossy(&output.stdout).contains("sekrit-pass"));
    assert!(!String::from_utf8_lossy(&output.stderr).contains("sekrit-pass"));
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(!text.contains("sekrit-pass"));
    }
}

#[test]
fn acl_denied_oom_and_a_replica_give_clear_failures() {
    // An ACL user that may not SET.
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "limited",
            "on",
            ">limited-pw",
            "~*",
            "+@all",
            "-set",
        ])
        .query::<()>(&mut conn)
        .unwrap();
    probe_writes(
        &format!("redis://limited:limited-pw@127.0.0.1:{}", server.port()),
        "1M",
    )
    .assert()
    .code(1)
    .stdout(predicate::str::contains("NOPERM"))
    .stderr(predicate::str::contains("write(s) failed"));

    // maxmemory too small for the value: past the tool's own check (--force-memory), the
    // server's OOM reply.
    let small = TestServer::start(&["maxmemory 8mb"]);
    probe_writes(&small.url(), "16M")
        .arg("--force-memory")
        .assert()
        .code(1)
        .stdout(predicate::str::contains("OOM"));
    assert!(small.keys("holprobe:*").is_empty());

    // A read-only replica refuses writes before any is sent; observing it is fine.
    let replica_of = format!("replicaof 127.0.0.1 {}", server.port());
    let replica = TestServer::start(&[&replica_of]);
    probe_cmd()
        .args(["--url", &replica.url(), "--writer-sizes", "1M"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("read-only replica"));
    probe_cmd()
        .args(["--url", &replica.url(), "--duration", "300ms"])
        .assert()
        .success();
}

#[test]
fn a_probe_the_user_may_not_send_is_refused_before_the_run() {
    // Every probe refused by the ACL made a `complete` run of error replies, exit 0, and a scan
    // that quoted others' waits from them (the hostile trial).
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    for (user, rules) in [
        ("noping", &["~*", "+@all", "-ping"][..]),
        ("appkeys", &["~app:*", "+@all"][..]),
    ] {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg("on")
            .arg(">sekrit-pw")
            .arg(rules)
            .query::<()>(&mut conn)
            .unwrap();
    }
    let url = |user: &str| format!("redis://{user}:sekrit-pw@127.0.0.1:{}", server.port());
    for (args, flag) in [
        (
            vec![
                "--url".to_string(),
                url("noping"),
                "--duration".into(),
                "300ms".into(),
            ],
            "--probe-cmd ping",
        ),
        (
            vec!["keys".to_string(), "--url".into(), url("noping")],
            "--probe-cmd ping",
        ),
        (
            vec![
                "--url".to_string(),
                url("appkeys"),
                "--probe-cmd".into(),
                "get".into(),
                "--duration".into(),
                "300ms".into(),
            ],
            "--probe-cmd get",
        ),
    ] {
        let out = exits_with(probe_cmd().args(&args), 1);
        let line = format!("error: {flag}: the server refuses it to the connection's user");
        assert!(out.stderr.contains(&line), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains("NOPERM"), "{}", out.stderr);
        assert!(!out.stderr.contains("sekrit-pw") && !out.stdout.contains("sekrit-pw"));
        assert!(!out.stdout.contains("baseline"), "{}", out.stdout);
    }
    // Nothing was set or left.
    assert!(server.keys("holprobe:*").is_empty());
}

#[test]
fn a_server_without_config_is_still_measured() {
    let server = TestServer::start(&["rename-command CONFIG \"\""]);
    let dir = tempfile::tempdir().unwrap();
    probe_writes(&server.url(), "1M")
        .arg("--out")
        .arg(dir.path())
        .assert()
        .success();
    let run = read_json(&dir.path().join("run.json"));
    assert!(run["server"]["maxmemory_bytes"].is_null());
}

#[test]
fn out_directories_are_checked_before_the_run() {
    // Not writable.
    probe_cmd()
        .args(["--writer-sizes", "1M", "--out", "/proc/holprobe-out"])
        .args(["--server-bin", "/nonexistent/redis-server"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--out"));
    // Already holds a run.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("run.json"), "{}").unwrap();
    probe_cmd()
        .args([
            "--writer-sizes",
            "1M",
            "--server-bin",
            "/nonexistent/redis-server",
            "--out",
        ])
        .arg(dir.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("already holds a run"));
}

#[test]
fn dry_run_connects_to_nothing() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    probe_cmd()
        .args([
            "--url",
            &format!("redis://:pw@127.0.0.1:{port}"),
            "--writer-sizes",
            "1M,2G",
        ])
        .args(["--overwrite", "--dry-run"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "SET holprobe:<run-id>:w2:2G:1 <2G random bytes>",
        ))
        .stdout(predicate::str::contains("memory: client about 2.0 GiB"))
        .stdout(predicate::str::contains("pw").not());
    assert!(
        listener.accept().is_err(),
        "dry run connected to the server"
    );
}

#[test]
fn reset_probe_connections_reconnect_and_the_run_completes() {
    let server = TestServer::start(&[]);
    // Every other client: the probe threads' connections (and the control one).
    let killer = server.command_after::<i64>(
        Duration::from_millis(700),
        redis::cmd("CLIENT").arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"]),
    );
    let dir = tempfile::tempdir().unwrap();
    probe_cmd()
        .args(["--url", &server.url(), "--duration", "1500ms", "--out"])
        .arg(dir.path())
        .assert()
        .success();
    assert!(
        killer.join().unwrap().unwrap() >= 2,
        "the probe connections were not killed"
    );
    // Each thread noticed its connection closing and opened a new one. A reset loses only the
    // probes outstanding at it (recorded as errors, with the reason), never the probes after it.
    // How many were outstanding is the host's doing, not the tool's: a server off its core for
    // 2 ms on a loaded 2-core machine had 3 probes of one thread unanswered when it closed the
    // connection (a close with unread probes is a reset). So each thread's failures are judged
    // by their shape: one unbroken run of probe numbers, every probe after it answered, all sent
    // within 50 ms (one reset, noticed at once), and never more than 25.
    let run = read_json(&dir.path().join("run.json"));
    assert!(
        run["probe_engine"]["reconnects"].as_u64().unwrap() >= 2,
        "{}",
        run["probe_engine"]
    );
    let probes = read_csv(&dir.path().join("probes.csv"));
    let failed: Vec<_> = probes.iter().filter(|p| p["ok"] == "false").collect();
    assert!(failed.iter().all(|p| !p["error"].is_empty()), "{failed:?}");
    for thread in ["0", "1"] {
        let number =
            |p: &std::collections::HashMap<String, String>| -> u64 { p["seq"].parse().unwrap() };
        let mut lost: Vec<_> = failed.iter().filter(|p| p["thread"] == thread).collect();
        lost.sort_by_key(|p| number(p));
        let (Some(first), Some(last)) = (lost.first(), lost.last()) else {
            continue;
        };
        assert!(lost.len() <= 25, "thread {thread}: {lost:?}");
        assert_eq!(
            number(last) - number(first) + 1,
            lost.len() as u64,
            "thread {thread}: failures not in one run: {lost:?}"
        );
        let sent: Vec<u64> = lost.iter().map(|p| p["sent_us"].parse().unwrap()).collect();
        let span = sent.iter().max().unwrap() - sent.iter().min().unwrap();
        assert!(
            span <= 50_000,
            "thread {thread}: failures over {span} µs: {lost:?}"
        );
        let later = probes
            .iter()
            .filter(|p| p["thread"] == thread && number(p) > number(last))
            .count();
        assert!(
            later > 100,
            "thread {thread}: only {later} probes after its reset"
        );
    }
    // Both threads went on probing after the reset.
    for thread in ["0", "1"] {
        let after = probes
            .iter()
            .filter(|p| p["thread"] == thread && p["ok"] == "true")
            .filter(|p| p["intended_us"].parse::<u64>().unwrap() > 1_000_000)
            .count();
        assert!(after > 100, "thread {thread} stopped after the reset");
        // No probe slot went unrecorded across the reconnect: each thread's probes are numbered
        // without a gap.
        let mut seqs: Vec<u64> = probes
            .iter()
            .filter(|p| p["thread"] == thread)
            .map(|p| p["seq"].parse().unwrap())
            .collect();
        seqs.sort_unstable();
        assert!(
            seqs.iter().enumerate().all(|(i, &s)| s == i as u64),
            "thread {thread}: probe numbers with a gap"
        );
    }
    assert_eq!(run["status"], "complete");
}

/// An actor whose thread dies without a word (a panic) ends the run as failed, with the
/// reason, instead of leaving it waiting forever; the probe key and settings are cleaned up.
#[test]
fn a_writer_thread_that_dies_fails_the_run_instead_of_hanging_it() {
    use std::sync::atomic::AtomicBool;
    use std::thread::JoinHandle;

    use holprobe::measure::actor::{Actor, ActorContext};
    use holprobe::measure::target::{Target, TargetSpec};
    use holprobe::output::export::RunStatus;
    use holprobe::run::{RunOptions, run_with_actor};

    struct DiesAtOnce;
    impl Actor for DiesAtOnce {
        fn steps_total(&self) -> usize {
            1
        }
        fn spawn(self: Box<Self>, _ctx: ActorContext) -> anyhow::Result<JoinHandle<()>> {
            Ok(thread::spawn(|| panic!("a test actor that dies at once")))
        }
    }

    let server = TestServer::start(&[]);
    let target = Target::open(&TargetSpec::External(server.server.conn_info())).unwrap();
    let options = RunOptions {
        duration: Some(Duration::from_secs(60)),
        ..RunOptions::default()
    };
    let started = std::time::Instant::now();
    let report = run_with_actor(
        &options,
        &target,
        Some(Box::new(DiesAtOnce)),
        &AtomicBool::new(false),
        &mut |_| {},
    )
    .expect("the run returns a report");
    // Far below the 60 s cap: the run noticed the dead thread.
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(report.status, RunStatus::Failed);
    let reason = report.status_reason.unwrap_or_default();
    assert!(
        reason.contains("the writer thread panicked: a test actor that dies at once"),
        "{reason}"
    );
    assert!(server.keys("holprobe:*").is_empty());
}

/// Every thread of a run that panics (the writer, a probe thread, the memory sampler, the
/// slow-log poller) ends the run as failed with the panic's message, even a run with no
/// --duration, and the keys are cleaned up. The panics are asked for by HOLPROBE_TEST_PANIC,
/// which only debug builds read.
#[cfg(debug_assertions)]
#[test]
fn a_panicking_thread_fails_the_run_with_its_message() {
    let server = TestServer::start(&[]);
    let writer: &[&str] = &["--writer-sizes", "1M", "--repeat", "1000", "--gap", "50ms"];
    let observe: &[&str] = &[];
    for (thread, args) in [
        ("writer", writer),
        ("probe", observe),
        ("sampler", writer),
        ("poller", observe),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(probe_bin())
            .env("HOLPROBE_TEST_PANIC", thread)
            .args(["--url", &server.url()])
            .args(args)
            .arg("--out")
            .arg(dir.path())
            .spawn_quiet();
        let status = wait_within(&mut child, Duration::from_secs(30));
        let stderr = stderr_of(&mut child);
        assert_eq!(status.code(), Some(1), "{thread}: {stderr}");
        let run = read_json(&dir.path().join("run.json"));
        assert_eq!(run["status"], "failed", "{thread}");
        let reason = run["status_reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(&format!(
                "panicked: HOLPROBE_TEST_PANIC={thread}: a panic a test asked for"
            )),
            "{thread}: {reason}"
        );
        let error_line = stderr
            .lines()
            .find(|l| l.starts_with("error:"))
            .unwrap_or("");
        assert!(error_line.contains(reason), "{thread}: {stderr}");
        assert!(server.keys("holprobe:*").is_empty(), "{thread}");
    }
}

/// A load generator thread that panics fails the load run with its message, as the probe
/// session's threads do (the run used to end `complete` without that thread's requests); the
/// writer beside it is stopped and its keys removed. The panic is asked for by
/// HOLPROBE_TEST_PANIC, which only debug builds read.
#[cfg(debug_assertions)]
#[test]
fn a_panicking_load_generator_thread_fails_the_load_run() {
    let server = TestServer::start(&[]);
    Command::new(probe_bin())
        .args(["populate", "--url", &server.url(), "--keys", "1000"])
        .output()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(probe_bin())
        .env("HOLPROBE_TEST_PANIC", "load")
        .args([
            "load",
            "--url",
            &server.url(),
            "--clients",
            "4",
            "--duration",
            "20s",
        ])
        .args(["--writer-sizes", "1M", "--repeat", "1000", "--gap", "1s"])
        .arg("--out")
        .arg(dir.path())
        .spawn_quiet();
    let started = Instant::now();
    let status = wait_within(&mut child, Duration::from_secs(30));
    let stderr = stderr_of(&mut child);
    assert_eq!(status.code(), Some(1), "{stderr}");
    // It ends when the thread dies, not at the end of --duration.
    assert!(started.elapsed() < Duration::from_secs(10), "{stderr}");
    let run = read_json(&dir.path().join("run.json"));
    assert_eq!(run["status"], "failed");
    let reason = run["status_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("a load generator thread panicked: HOLPROBE_TEST_PANIC=load"),
        "{reason}"
    );
    // The population stays (`probe clean` removes it); the writer's keys are gone.
    assert!(
        server
            .keys("holprobe:*")
            .iter()
            .all(|k| k.starts_with("holprobe:load:")),
        "{:?}",
        server.keys("holprobe:*")
    );
}

/// Starts `probe` with an embedded server and a long plan; returns it and the server's port, once
/// the tool has said it (the server is up by then).
fn start_with_embedded_server() -> (std::process::Child, std::net::SocketAddr) {
    let mut child = Command::new(probe_bin())
        .args(["--writer-sizes", "1M", "--repeat", "1000", "--gap", "50ms"])
        .spawn_quiet();
    // "started redis 7.0.15 (/usr/bin/redis-server) on 127.0.0.1:PORT, persistence off; ..."
    let mut reader = BufReader::new(child.stderr.take().unwrap());
    let mut port = None;
    let mut line = String::new();
    while port.is_none() && reader.read_line(&mut line).unwrap() > 0 {
        port = line
            .split("on 127.0.0.1:")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|p| p.parse::<u16>().ok());
        line.clear();
    }
    let port = port.expect("the tool names the port of the server it started");
    // Keep reading stderr, so the tool never blocks on a full pipe.
    thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok(),
        "the server is up while the tool runs"
    );
    (child, addr)
}

/// Fails unless nothing answers on `addr` within 5 s.
fn assert_gone_soon(addr: std::net::SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the server on {addr} outlived the tool by 5 s"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// The tool killed outright (kill -9: no handler runs) takes its embedded server with it: the
/// throwaway server never outlives the tool, holding its memory and port.
#[cfg(target_os = "linux")]
#[test]
fn the_embedded_server_dies_with_the_tool_even_on_kill_9() {
    let (mut child, addr) = start_with_embedded_server();
    thread::sleep(Duration::from_millis(300));
    signal(child.id(), libc::SIGKILL);
    let _ = child.wait();
    assert_gone_soon(addr);
}

/// A second Ctrl-C exits at once (no destructor runs, the server is not stopped by the tool):
/// the kernel's parent-death signal takes the server down all the same.
#[cfg(target_os = "linux")]
#[test]
fn the_embedded_server_dies_with_the_tool_on_a_second_ctrl_c() {
    let (mut child, addr) = start_with_embedded_server();
    thread::sleep(Duration::from_millis(300));
    signal(child.id(), libc::SIGINT);
    signal(child.id(), libc::SIGINT);
    let status = wait_within(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(130));
    assert_gone_soon(addr);
}

/// A reply that timed out arrives later: the connection must not hand it to the next command
/// (the writer once read a late INFO reply as its SET's). After the timeout every use of the
/// connection fails with the timeout, and the caller reconnects or gives up.
#[test]
fn a_timed_out_connection_never_reads_a_late_reply_as_the_next_ones() {
    use holprobe::measure::resp::RawConn;
    use holprobe::measure::target::ConnInfo;

    let server = TestServer::start(&[]);
    let port = server.port();
    let mut info = ConnInfo::loopback(port);
    info.command_timeout = Duration::from_millis(200);
    let mut conn = RawConn::connect(&info).unwrap();
    // Every client's commands wait 600 ms from now (CLIENT PAUSE answers at once), so the INFO
    // below times out and its reply comes after.
    let mut control = ConnInfo::loopback(port).redis_connection().unwrap();
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(600)
        .arg("ALL")
        .query::<()>(&mut control)
        .unwrap();
    let first = conn.command(&[b"INFO", b"memory"]).unwrap_err();
    assert!(
        matches!(
            first.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{first:?}"
    );
    // The pause is over and the INFO reply is in the socket by now.
    thread::sleep(Duration::from_millis(700));
    let second = conn.command(&[b"PING"]).unwrap_err();
    assert_eq!(second.kind(), first.kind());
    assert!(second.to_string().contains("earlier"), "{second}");
}

/// Ctrl-C while a write is under way: the write is finished and recorded, and the probes go on
/// until it has ended, so its window is covered by probes like every other write's.
#[test]
fn a_write_under_way_at_ctrl_c_is_covered_by_probes_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    // Back-to-back 64M writes (each ~50 ms, 20 ms gaps): a write is under way most of the time.
    let mut child = Command::new(probe_bin())
        .args([
            "--writer-sizes",
            "64M",
            "--repeat",
            "200",
            "--gap",
            "20ms",
            "--out",
        ])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Ctrl-C once two writes are in (not after a fixed time: on a busy host the embedded
    // server's start and the value's generation can take longer than a second), so that the
    // third is under way.
    let writes_csv = dir.path().join("writes.csv");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline
        && std::fs::read_to_string(&writes_csv).map_or(0, |t| t.lines().count()) < 3
    {
        thread::sleep(Duration::from_millis(20));
    }
    thread::sleep(Duration::from_millis(30));
    signal(child.id(), libc::SIGINT);
    let status = wait_within(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130));
    let writes = read_csv(&writes_csv);
    let probes = read_csv(&dir.path().join("probes.csv"));
    assert!(writes.len() >= 2, "{writes:?}");
    let last_probe = probes
        .iter()
        .map(|p| p["intended_us"].parse::<u64>().unwrap())
        .max()
        .unwrap();
    for write in &writes {
        let reply: u64 = write["reply_us"].parse().unwrap();
        assert!(
            reply < last_probe,
            "write {} ended at {reply} µs, after the last probe ({last_probe} µs)",
            write["seq"]
        );
    }
    let run = read_json(&dir.path().join("run.json"));
    assert_eq!(run["status"], "interrupted");
}

/// Probes still waiting when a run stops are kept as failed rows with the reason, not lost.
#[test]
fn probes_unanswered_at_the_end_are_failed_rows() {
    let server = TestServer::start(&[]);
    // Past the run's end and the probe threads' 1 s wait for late replies.
    let pauser = server.command_after::<()>(
        Duration::from_millis(1200),
        redis::cmd("CLIENT").arg("PAUSE").arg(2500).arg("ALL"),
    );
    let dir = tempfile::tempdir().unwrap();
    probe_cmd()
        .args(["--url", &server.url(), "--duration", "1500ms", "--out"])
        .arg(dir.path())
        .timeout(Duration::from_secs(30))
        .assert()
        .success();
    pauser.join().unwrap().unwrap();
    let probes = read_csv(&dir.path().join("probes.csv"));
    let unanswered: Vec<_> = probes
        .iter()
        .filter(|p| p["error"] == "no reply before the run stopped")
        .collect();
    assert!(!unanswered.is_empty(), "no probe was waiting at the end");
    assert!(unanswered.iter().all(|p| p["reply_us"].is_empty()));
    let run = read_json(&dir.path().join("run.json"));
    assert_eq!(
        run["probe_engine"]["unanswered_at_stop"].as_u64().unwrap(),
        unanswered.len() as u64
    );
}

/// Load mode stops as the probe session does: at Ctrl-C the write under way is finished and
/// recorded while the load clients go on, so the load covers every write to its end. The write
/// is held under way by pausing the server's writes (GETs go on) across the Ctrl-C.
#[test]
fn a_write_under_way_at_ctrl_c_is_covered_by_the_load_to_its_end() {
    let server = TestServer::start(&[]);
    probe_cmd()
        .args(["populate", "--url", &server.url(), "--keys", "1000"])
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    let dir = tempfile::tempdir().unwrap();
    let mut control = server.conn();
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(3000)
        .arg("WRITE")
        .query::<()>(&mut control)
        .unwrap();
    let paused_at = Instant::now();
    let mut child = Command::new(probe_bin())
        .args(["load", "--url", &server.url(), "--clients", "2"])
        .args(["--writer-sizes", "1M", "--gap", "1s"])
        .arg("--out")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(1500));
    signal(child.id(), libc::SIGINT);
    let status = wait_within(&mut child, Duration::from_secs(30));
    assert!(paused_at.elapsed() >= Duration::from_secs(3));
    assert_eq!(status.code(), Some(130));
    let run = read_json(&dir.path().join("run.json"));
    assert_eq!(run["status"], "interrupted");
    let load_end_us =
        run["load_start_us"].as_u64().unwrap() + (run["runtime_s"].as_f64().unwrap() * 1e6) as u64;
    let writes = run["writes"].as_array().unwrap();
    // The SET, held by the pause past the Ctrl-C, then finished (the plan's DELETE is not made).
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0]["ok"], true, "{writes:?}");
    let reply = writes[0]["reply_us"].as_u64().unwrap();
    assert!(
        reply <= load_end_us,
        "the write ended at {reply} µs, after the load stopped ({load_end_us} µs)"
    );
    // The load went on through it: its requests are counted.
    let under_load = &run["writes_under_load"][0];
    assert!(
        under_load["requests_in_window"].as_u64().unwrap() > 0,
        "{under_load}"
    );
    // The key the writer made is gone.
    assert!(
        server
            .keys("holprobe:*")
            .iter()
            .all(|k| k.starts_with("holprobe:load:"))
    );
}

/// Custom commands (GET, UNLINK) are found in the server's slow log under their own names, not
/// as the SET before them (whose entry names the same key), and are sent without the maxmemory
/// check meant for a SET: here a GET of a value the server already holds would not pass it.
#[test]
fn custom_commands_are_looked_up_by_their_own_name_and_skip_the_set_checks() {
    use std::sync::atomic::AtomicBool;

    use holprobe::measure::target::{Target, TargetSpec};
    use holprobe::measure::writer::{CustomCommand, WriterPlan};
    use holprobe::record::WriteOp;
    use holprobe::run::{RunOptions, run};

    let server = TestServer::start(&[
        "maxmemory 48mb",
        "maxmemory-policy noeviction",
        "slowlog-log-slower-than 0",
        "slowlog-max-len 1000000",
    ]);
    let target = Target::open(&TargetSpec::External(server.server.conn_info())).unwrap();
    let options = RunOptions {
        writer: Some(WriterPlan {
            sizes: vec![16 << 20],
            gap: Duration::from_millis(100),
            commands: vec![
                CustomCommand::new(["GET", "{key}"]),
                CustomCommand::removing(["UNLINK", "{key}"]),
            ],
            ..WriterPlan::default()
        }),
        ..RunOptions::default()
    };
    let report = run(&options, &target, &AtomicBool::new(false), &mut |_| {}).unwrap();
    let ops: Vec<WriteOp> = report.writes.iter().map(|w| w.op).collect();
    assert_eq!(ops, [WriteOp::Set, WriteOp::Command, WriteOp::Command]);
    for write in &report.writes {
        assert!(write.ok, "{:?}: {:?}", write.op, write.error);
    }
    // What the server logged of each command on the key, by name.
    let key = report.writes[0].key.clone();
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(1_000_000)
        .query(&mut server.conn())
        .unwrap();
    // The oldest entry of each: the cleanup's UNLINK of the same key comes after the writer's
    // (SLOWLOG GET lists the newest first).
    let logged = |name: &str| -> Option<u64> {
        entries.iter().rev().find_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                return None;
            };
            let (redis::Value::Int(us), redis::Value::Array(args)) = (&fields[2], &fields[3])
            else {
                return None;
            };
            let text = |v: &redis::Value| match v {
                redis::Value::BulkString(b) => String::from_utf8_lossy(b).to_string(),
                _ => String::new(),
            };
            (args.len() >= 2 && text(&args[0]) == name && text(&args[1]) == key)
                .then_some(*us as u64)
        })
    };
    for (write, name) in report.writes.iter().zip(["SET", "GET", "UNLINK"]) {
        assert!(logged(name).is_some(), "no {name} of {key} in the slow log");
        assert_eq!(write.server_exec_us, logged(name), "{name}");
    }
    assert!(server.keys("holprobe:*").is_empty());
}

/// `--shard 99` against one standalone server was ignored; `--duration` cutting a writer's plan
/// short exited 130 (the Ctrl-C code); a failed write (OOM past --force-memory) exited 1 while
/// run.json said `complete` with no reason.
#[test]
fn a_shard_a_standalone_server_lacks_is_refused() {
    let server = TestServer::start(&[]);
    let stderr = exits_with(
        probe_cmd().args([
            "--url",
            &server.url(),
            "--shard",
            "99",
            "--duration",
            "300ms",
        ]),
        2,
    )
    .stderr;
    assert!(stderr.contains("'99' for --shard"), "{stderr}");
    assert_eq!(stderr.matches("error:").count(), 1, "{stderr}");
}

#[test]
fn a_duration_that_cuts_the_writer_short_is_not_an_interrupt() {
    let server = TestServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cut");
    let stderr = exits_with(
        probe_cmd()
            .args([
                "--url",
                &server.url(),
                "--writer-sizes",
                "1M",
                "--repeat",
                "100",
            ])
            .args(["--gap", "200ms", "--duration", "1s", "--out"])
            .arg(&out),
        0,
    )
    .stderr;
    assert!(
        stderr.contains("--duration ended before the writer's plan"),
        "{stderr}"
    );
    let run = read_json(&out.join("run.json"));
    assert_eq!(run["status"], "interrupted", "{run}");
    assert_eq!(
        run["status_reason"],
        "--duration ended before the writer's plan"
    );
}

#[test]
fn a_failed_write_fails_the_run_in_run_json_too() {
    let dir = tempfile::tempdir().unwrap();
    let small = TestServer::start(&["maxmemory 8mb"]);
    let out = dir.path().join("oom");
    exits_with(
        probe_writes(&small.url(), "16M")
            .args(["--force-memory", "--out"])
            .arg(&out),
        1,
    );
    let run = read_json(&out.join("run.json"));
    assert_eq!(run["status"], "failed", "{run}");
    let reason = run["status_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("write(s) failed") && reason.contains("OOM"),
        "{reason}"
    );
}

/// `--out` holding any run's file (not only run.json) is refused without --force: a run killed
/// before its first run.json left CSVs the next run overwrote silently.
#[test]
fn any_run_file_in_out_is_refused_without_force() {
    for name in [
        "summary.csv",
        "probes.csv",
        "load_timeline.csv",
        "run.json.tmp",
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(name), "kept\n").unwrap();
        let output = probe_cmd()
            .args([
                "--duration",
                "1s",
                "--server-bin",
                "/nonexistent/redis-server",
            ])
            .arg("--out")
            .arg(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains("already holds a run"), "{name}: {stderr}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join(name)).unwrap(),
            "kept\n"
        );
    }
}

/// `--force` replaces a run with its files: an old calibration's, load's or scan's files left
/// beside the new run made the directory read as the old kind of run. Files the tool does not
/// write stay.
#[test]
fn force_takes_the_old_run_s_files_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let old = [
        "calibration.json",
        "calibration.csv",
        "load_timeline.csv",
        "load_writes.csv",
        "keys.csv",
        "summary.csv.tmp",
    ];
    for name in old {
        std::fs::write(dir.path().join(name), "old\n").unwrap();
    }
    std::fs::write(dir.path().join("notes.txt"), "mine\n").unwrap();
    // The old run's sub-runs (a --refit's model and type runs, a replay's, one per
    // --server-bin) go too; a directory of the user's own stays.
    std::fs::write(dir.path().join("model.json"), "old\n").unwrap();
    let subs = ["hash", "replay-2", "redis-7.0.15"];
    for sub in subs.iter().chain(&["mine"]) {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
        std::fs::write(dir.path().join(sub).join("run.json"), "old\n").unwrap();
    }
    let output = probe_cmd()
        .args(["--duration", "1s", "--force", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for name in old {
        assert!(
            !dir.path().join(name).exists(),
            "{name} left beside the new run"
        );
        // Kept aside, not lost.
        assert_eq!(
            std::fs::read_to_string(dir.path().join("replaced").join(name)).unwrap(),
            "old\n"
        );
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(),
        "mine\n"
    );
    assert!(!dir.path().join("model.json").exists());
    assert!(dir.path().join("replaced/model.json").is_file());
    for sub in subs {
        assert!(
            !dir.path().join(sub).exists(),
            "{sub} left beside the new run"
        );
        assert!(
            dir.path()
                .join("replaced")
                .join(sub)
                .join("run.json")
                .is_file()
        );
    }
    assert!(dir.path().join("mine/run.json").is_file());
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("run.json")).unwrap())
            .unwrap();
    assert_eq!(meta["status"], "complete", "{meta}");
}

/// `probe --duration 4s --out DIR` started in the background (stderr piped, stdout dropped).
fn observe_for_4s_into(dir: &std::path::Path) -> std::process::Child {
    Command::new(assert_cmd::cargo::cargo_bin("probe"))
        .args(["--duration", "4s", "--out"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// run.json says `running` from the start: it first appeared ~5 s in, so a run killed before
/// left none.
#[test]
fn run_json_says_running_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = observe_for_4s_into(dir.path());
    let run_json = dir.path().join("run.json");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !run_json.exists() && Instant::now() < deadline {
        assert!(
            first.try_wait().unwrap().is_none(),
            "the run ended before any run.json"
        );
        thread::sleep(Duration::from_millis(20));
    }
    let running = read_json(&run_json);
    let still_going = first.try_wait().unwrap().is_none();
    assert!(still_going, "run.json appeared only at the end");
    assert_eq!(running["status"], "running", "{running}");
    let status = wait_within(&mut first, Duration::from_secs(60));
    assert_eq!(status.code(), Some(0));
    assert_eq!(read_json(&run_json)["status"], "complete");
}

/// A second run into the --out of a run under way is refused in one line, exit 2, --force or
/// not (both ran, and probes.csv got malformed rows).
#[test]
fn a_running_run_holds_its_out_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = observe_for_4s_into(dir.path());
    let probes_csv = dir.path().join("probes.csv");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !probes_csv.exists() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(first.try_wait().unwrap().is_none(), "the run ended already");
    let stderr = exits_with(
        probe_cmd()
            .args(["--duration", "1s", "--force", "--out"])
            .arg(dir.path()),
        2,
    )
    .stderr;
    assert!(stderr.contains("in use by another run"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");

    let status = wait_within(&mut first, Duration::from_secs(60));
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        read_json(&dir.path().join("run.json"))["status"],
        "complete"
    );
}

/// A small tmpfs mounted for one test, unmounted on drop; `None` (the test says why and is
/// skipped) where this process may not mount.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !mounted {
            eprintln!("skipping: cannot mount a tmpfs here (needs root)");
            return None;
        }
        Some(SmallDisk { dir })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// A full disk ended the run with probes.csv in half a row and no run.json: now the error says
/// the disk is full, every CSV ends in whole rows, and run.json says the run failed and why.
#[test]
fn a_full_disk_ends_the_run_with_a_clear_error_and_a_run_json_that_says_so() {
    let Some(disk) = SmallDisk::mount("1m") else {
        return;
    };
    let out = disk.dir.path().join("run");
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("probe"))
        .args(["--duration", "60s", "--probe-rate", "2000", "--out"])
        .arg(&out)
        .spawn_quiet();
    let status = wait_within(&mut child, Duration::from_secs(45));
    let stderr = stderr_of(&mut child);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(stderr.contains("the disk of --out is full"), "{stderr}");
    let run = read_json(&out.join("run.json"));
    assert_eq!(run["status"], "failed", "{run}");
    let reason = run["status_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("could not write the exports"), "{reason}");
    for name in ["probes.csv", "writes.csv", "stalls.csv", "timeline.csv"] {
        let text = std::fs::read_to_string(out.join(name)).unwrap();
        assert!(text.ends_with('\n'), "{name} ends in half a row");
        read_csv(&out.join(name));
    }
    assert!(!out.join(".holprobe-reserve").exists());
    assert!(!out.join("run.json.tmp").exists());
}

/// A stand-in server binary: a shell script that `exec`s, so killing it leaves nothing behind.
fn script(dir: &std::path::Path, name: &str, body: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A `--server-bin` whose `--version` never exits: no output for 250 s (Ctrl-C ignored), and
/// `--dry-run` ran it although it says nothing is started. Now the wait is bounded (5 s) and
/// said, and a dry run runs nothing.
#[test]
fn a_server_binary_that_hangs_is_bounded_and_a_dry_run_never_runs_it() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("was-run");
    let hangs = script(
        dir.path(),
        "hangs",
        &format!("touch {}\nexec sleep 600", marker.display()),
    );
    exits_with(
        probe_cmd()
            .args(["--dry-run", "--duration", "1s", "--server-bin"])
            .arg(&hangs)
            .timeout(Duration::from_secs(30)),
        0,
    );
    assert!(!marker.exists(), "the dry run ran the binary");

    let Exited { stderr, took, .. } = exits_with(
        probe_cmd()
            .args(["--duration", "1s", "--server-bin"])
            .arg(&hangs)
            .timeout(Duration::from_secs(60)),
        1,
    );
    assert!(
        stderr.contains("--version did not exit within 5 s"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

/// A binary that never listens was reported after 30 s for a 10 s limit (three attempts).
#[test]
fn a_server_that_never_listens_is_reported_after_one_limit() {
    let dir = tempfile::tempdir().unwrap();
    let silent = script(
        dir.path(),
        "silent",
        "if [ \"$1\" = --version ]; then echo 'Redis server v=7.0.15 sha=0'; exit 0; fi\nexec sleep 600",
    );
    let Exited { stderr, took, .. } = exits_with(
        probe_cmd()
            .args(["--duration", "1s", "--server-bin"])
            .arg(&silent)
            .timeout(Duration::from_secs(90)),
        1,
    );
    assert!(stderr.contains("did not answer PING"), "{stderr}");
    assert!(
        took < Duration::from_secs(16),
        "took {took:?} for a 10 s limit"
    );
}

/// The free port the tool chose was taken by another process's server before the one it started
/// listened (seen on CI: another test's server got it), and the tool ran its whole job against
/// that server, reporting it as the one it had started. Now the server answering must be the
/// started process or run under it (`INFO server` process_id). The stand-in binary below starts
/// a daemonized redis-server on the port it is given (reparented away, so not the tool's child)
/// and never listens itself.
#[test]
fn a_port_taken_by_another_server_is_not_taken_for_the_started_one() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().display().to_string();
    let impostor = script(
        dir.path(),
        "impostor",
        &format!(
            "if [ \"$1\" = --version ]; then echo 'Redis server v=7.0.15 sha=0'; exit 0; fi\n\
             port=''; while [ $# -gt 0 ]; do [ \"$1\" = --port ] && port=$2; shift; done\n\
             echo \"$port\" > {data}/port\n\
             redis-server --port \"$port\" --bind 127.0.0.1 --save '' --appendonly no \
             --daemonize yes --dir {data} --logfile {data}/impostor.log\n\
             exec sleep 600"
        ),
    );
    let outcome = std::panic::catch_unwind(|| {
        exits_with(
            probe_cmd()
                .args(["--duration", "1s", "--server-bin"])
                .arg(&impostor)
                .timeout(Duration::from_secs(90)),
            1,
        )
    });
    // The daemonized server is stopped whatever the outcome.
    if let Ok(port) = std::fs::read_to_string(dir.path().join("port")) {
        let _ = Command::new("redis-cli")
            .args(["-p", port.trim(), "shutdown", "nosave"])
            .output();
    }
    let Exited { stderr, .. } = outcome.unwrap_or_else(|e| std::panic::resume_unwind(e));
    assert!(
        stderr.contains("another process") && stderr.contains("took the port"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("observing for"),
        "ran against the other server: {stderr}"
    );
}

/// `rediss://` to a plain port with `--connect-timeout 2s`: silent for 32 s (the handshake
/// waited --timeout, twice), then "os error 11". Now the handshake is part of connecting.
#[test]
fn a_tls_url_to_a_plain_port_fails_within_the_connect_timeout() {
    let server = TestServer::start(&[]);
    let Exited { stderr, took, .. } = exits_with(
        probe_cmd()
            .args([
                "--url",
                &format!("rediss://127.0.0.1:{}", server.port()),
                "--connect-timeout",
                "2s",
                "--duration",
                "1s",
            ])
            .timeout(Duration::from_secs(60)),
        1,
    );
    assert!(
        stderr.contains("timed out after 2 s waiting for the TLS handshake"),
        "{stderr}"
    );
    assert!(!stderr.contains("os error 11"), "{stderr}");
    // The limit plus a margin of 2 s for a loaded host.
    assert!(took < Duration::from_secs(4), "took {took:?}");
}

/// A server frozen (`kill -STOP`) past `--timeout 2s`: the tool took 14.4 s, said nothing
/// meanwhile, and its cleanup said "os error 11"; then 7-10 s (a limit for the probes to tell,
/// up to two for the slow-log poller's last polls, two for the two tries at removing the key).
/// Now a line on stderr within a second or two of the silence, the run over within 2 × the
/// limit (one for the probes to tell, one for the whole cleanup: both tries at removing the key
/// share it, and no last poll follows a failed one) plus a margin of 2 s for a loaded host, and
/// timeouts said as timeouts.
#[test]
fn a_frozen_server_is_said_while_waited_for_and_bounded_by_the_timeout() {
    let (status, took, said_after, text, _) = frozen_run(&[]);
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        said_after < Duration::from_secs(3),
        "said after {said_after:?}: {text}"
    );
    assert!(!text.contains("os error 11"), "{text}");
    // Said as a timeout, with the limit (no cleanup command follows: PING probes make no key).
    assert!(
        text.contains("did not answer a probe within --timeout 2s"),
        "{text}"
    );
    // The freeze that ended the run is said with its length ("stalls over 1ms: 0" alone read
    // as a quiet server): at least the 2 s limit.
    let said = text
        .split("the server answered no probe for ")
        .nth(1)
        .and_then(|rest| rest.split(" ms").next())
        .and_then(|ms| ms.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no timed-out stall said: {text}"));
    assert!((2_000.0..4_000.0).contains(&said), "{said} ms: {text}");
    assert!(took < Duration::from_secs(6), "took {took:?}: {text}");
}

/// The same with `--tune-server`: the settings' restore waited a limit more (the run took 6.1 s
/// at `--timeout 2s`), then the tool's drop tried once more, and the run said "server settings
/// changed for the run and restored" although they were not. Now the restore gets what is left
/// of the cleanup's limit and at least a second, what it could not put back is said to be kept
/// by the run's marker (which is still there, naming them, for the next run or `probe clean`:
/// tests/marker.rs), and nothing claims they were restored.
#[test]
fn a_frozen_server_leaves_its_settings_to_the_marker_within_the_bound() {
    let (status, took, _, text, markers) = frozen_run(&["--tune-server"]);
    assert_eq!(status.code(), Some(1), "{text}");
    // The way back: the run's marker, with the settings it changed, is still on the server.
    assert_eq!(markers.len(), 1, "{markers:?}: {text}");
    assert!(
        markers[0].contains("slowlog-log-slower-than"),
        "{markers:?}"
    );
    assert!(!text.contains("os error 11"), "{text}");
    assert!(
        text.contains("could not restore the server's settings")
            && text.contains("the run's marker keeps them"),
        "{text}"
    );
    assert!(!text.contains("changed for the run and restored"), "{text}");
    // Two limits and the restore's second, and a margin of 2 s for a loaded host.
    assert!(took < Duration::from_secs(7), "took {took:?}: {text}");
}

/// Runs the main job in observe mode with `--timeout 2s` (and `extra`) against a server frozen
/// (`kill -STOP`) once the run has started; the server is thawed after. Returns the exit
/// status, how long the tool took after the freeze, how soon after it the "no probe answered"
/// line came, everything it printed (stderr, then stdout), and the runs' markers left on the
/// server (each marker's value, after the thaw).
fn frozen_run(
    extra: &[&str],
) -> (
    std::process::ExitStatus,
    Duration,
    Duration,
    String,
    Vec<String>,
) {
    let server = TestServer::start(&[]);
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut server.conn())
        .unwrap();
    let pid: u32 = holprobe::measure::target::info_field(&info, "process_id")
        .unwrap()
        .parse()
        .unwrap();
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("probe"))
        .args([
            "--url",
            &server.url(),
            "--timeout",
            "2s",
            "--duration",
            "60s",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let reader = thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let _ = tx.send((Instant::now(), line.unwrap_or_default()));
        }
    });
    let mut stdout = child.stdout.take().unwrap();
    let out_reader = thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    // Frozen once the run has started.
    let started_line = rx.recv_timeout(Duration::from_secs(30));
    while !rx
        .recv_timeout(Duration::from_secs(30))
        .map(|(_, line)| line.starts_with("run "))
        .unwrap_or(true)
    {}
    thread::sleep(Duration::from_millis(500));
    signal(pid, libc::SIGSTOP);
    let frozen = Instant::now();
    let status = wait_within(&mut child, Duration::from_secs(60));
    let took = frozen.elapsed();
    signal(pid, libc::SIGCONT);
    let mut conn = server.conn();
    let names: Vec<String> = redis::cmd("SMEMBERS")
        .arg("holprobe:markers")
        .query(&mut conn)
        .unwrap();
    let markers: Vec<String> = names
        .iter()
        .map(|name| {
            let value: Option<String> = redis::cmd("GET").arg(name).query(&mut conn).unwrap();
            value.unwrap_or_default()
        })
        .collect();
    reader.join().unwrap();
    let stdout = out_reader.join().unwrap();
    let lines: Vec<(Instant, String)> = rx.try_iter().collect();
    let text: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
    let text = format!("{}\n{stdout}", text.join("\n"));
    assert!(started_line.is_ok(), "{text}");
    let said = lines
        .iter()
        .find(|(_, line)| line.contains("no probe answered for"))
        .unwrap_or_else(|| panic!("no line while waiting: {text}"));
    (status, took, said.0.duration_since(frozen), text, markers)
}

/// kill -9 of the tool left its embedded server's temporary directory behind (the server died
/// with it): the next start removes a directory whose tool is dead, and only such.
#[cfg(target_os = "linux")]
#[test]
fn a_dead_tools_server_directory_is_removed_by_the_next_start() {
    let tmp = tempfile::tempdir().unwrap();
    let workdirs = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("holprobe-server-"))
            })
            .collect()
    };
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("probe"))
        .args(["--duration", "60s"])
        .env("TMPDIR", tmp.path())
        .spawn_quiet();
    let mut reader = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("run ") && reader.read_line(&mut line).unwrap() > 0 {
        if !line.starts_with("run ") {
            line.clear();
        }
    }
    let left = workdirs();
    assert_eq!(left.len(), 1, "{left:?}");
    signal(child.id(), libc::SIGKILL);
    let _ = child.wait();
    assert!(left[0].exists(), "kill -9 leaves the directory");

    exits_with(
        probe_cmd()
            .args(["--duration", "300ms"])
            .env("TMPDIR", tmp.path()),
        0,
    );
    assert!(workdirs().is_empty(), "left: {:?}", workdirs());
}

/// The pid of a test server's process, from its INFO.
fn server_pid(server: &TestServer) -> u32 {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut server.conn())
        .unwrap();
    holprobe::measure::target::info_field(&info, "process_id")
        .unwrap()
        .parse()
        .unwrap()
}

/// `probe load` against a server frozen (`kill -STOP`) with `--timeout 2s`: every request timed
/// out, each connection was reopened (a connect at a time, each waiting on the frozen server),
/// and the load ran its whole `--duration` and 42 s more (72 s after the freeze for 30 s). Now
/// the first request that timed out with no reply from the server since ends the run: within
/// the limit plus a margin of 2 s for a loaded host, with the limit said.
#[test]
fn a_load_against_a_frozen_server_ends_within_the_timeout() {
    let server = TestServer::start(&[]);
    probe_cmd()
        .args(["populate", "--url", &server.url(), "--keys", "1000"])
        .assert()
        .success();
    let pid = server_pid(&server);
    let mut child = Command::new(probe_bin())
        .args(["load", "--url", &server.url(), "--timeout", "2s"])
        .args(["--duration", "60s", "--rate", "2000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("run ") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "ended early");
    }
    thread::sleep(Duration::from_millis(1000));
    signal(pid, libc::SIGSTOP);
    let frozen = Instant::now();
    let status = wait_within(&mut child, Duration::from_secs(90));
    let took = frozen.elapsed();
    signal(pid, libc::SIGCONT);
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(text.contains("timed out after 2 s waiting for"), "{text}");
    assert!(!text.contains("os error 11"), "{text}");
    assert!(took < Duration::from_secs(4), "took {took:?}: {text}");
}

/// The slow-log poller, its connection lost to a frozen server, connected again at its next
/// poll, and the connection waited the whole `--timeout` for the server's first reply again:
/// the last poll after the run had ended added the limit once more to a run's end. Now it
/// connects again only once the limit has passed since the failure.
#[test]
fn the_slow_log_pollers_reconnection_waits_no_limit_twice() {
    let server = TestServer::start(&[]);
    let mut conn = server.server.conn_info();
    conn.command_timeout = Duration::from_secs(2);
    conn.connect_timeout = Duration::from_secs(2);
    let mut poller = holprobe::measure::culprit::ServerLogPoller::connect(&conn).unwrap();
    poller.poll().unwrap();
    let pid = server_pid(&server);
    signal(pid, libc::SIGSTOP);
    let first = Instant::now();
    let failed = poller.poll();
    let first = first.elapsed();
    let again = Instant::now();
    let failed_again = poller.poll();
    let again = again.elapsed();
    signal(pid, libc::SIGCONT);
    assert!(failed.is_err());
    assert!(failed_again.is_err());
    assert!(first >= Duration::from_millis(1900), "{first:?}");
    assert!(again < Duration::from_millis(500), "{again:?}");
    // Once the limit has passed, it connects again (the server answers by now).
    thread::sleep(Duration::from_millis(2100));
    poller.poll().unwrap();
}

/// A library caller's `evict` op against a server the tool did not start is refused before
/// the writer sends anything (the command line refuses it earlier, with `--ops`): its
/// `maxmemory` stays as it was and no key is written.
#[test]
fn a_library_evict_on_someone_elses_server_is_refused_before_a_command() {
    use std::sync::atomic::AtomicBool;

    use holprobe::measure::target::{Target, TargetSpec};
    use holprobe::measure::writer::WriterPlan;
    use holprobe::record::WriteOp;
    use holprobe::run::{RunOptions, run};

    let server = TestServer::start(&[]);
    let target = Target::open(&TargetSpec::External(server.server.conn_info())).unwrap();
    let options = RunOptions {
        writer: Some(WriterPlan {
            sizes: vec![1 << 20],
            ops: vec![WriteOp::Set, WriteOp::Evict],
            ..WriterPlan::default()
        }),
        ..RunOptions::default()
    };
    let Err(err) = run(&options, &target, &AtomicBool::new(false), &mut |_| {}) else {
        panic!("an evict op on a server the tool did not start ran");
    };
    assert!(format!("{err:#}").contains("evict"), "{err:#}");
    let maxmemory: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(maxmemory[1], "0");
    assert!(server.keys("holprobe:*:w*").is_empty());
}

/// A server whose DEL is renamed away (or denied): a plan that needs DEL (the default's last op
/// too, with no --ops) is refused before anything is sent, and a plan without it cleans up with
/// UNLINK: the run's keys and its marker are gone after it. Before, the tool wrote the value,
/// failed its DEL, and left the value and its marker on the server (the hostile trial).
#[test]
fn a_server_without_del_is_refused_up_front_or_cleaned_with_unlink() {
    let server = TestServer::start(&["rename-command DEL \"\""]);
    probe_writes(&server.url(), "1M")
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "invalid value 'set,delete (the default)' for --ops: the server has no DEL command",
        ));
    assert!(server.keys("*").is_empty(), "{:?}", server.keys("*"));
    // Cut short after its first SET: the key left is removed at cleanup, by UNLINK.
    probe_cmd()
        .args([
            "--url",
            &server.url(),
            "--writer-sizes",
            "1M",
            "--ops",
            "set,unlink",
        ])
        .args(["--repeat", "3", "--gap", "1s", "--duration", "1500ms"])
        .assert()
        .success();
    assert!(server.keys("*").is_empty(), "{:?}", server.keys("*"));
    let mut conn = server.conn();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .unwrap();
    assert!(stats.contains("cmdstat_unlink:"), "{stats}");
}

/// A run whose cleanup cannot restore the server's settings (its user lost CONFIG mid-run) did
/// not end well: run.json says `failed` with the reason, and the exit status is not 0 (trial 37,
/// J6: exit 0 and `complete`, with four settings left changed and only a warning saying so).
#[test]
fn a_run_that_cannot_restore_the_settings_fails() {
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("ops")
        .arg("on")
        .arg(">OpsPw")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .query(&mut conn)
        .unwrap();
    let before: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("slowlog-log-slower-than")
        .query(&mut conn)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let url = format!("redis://ops:OpsPw@127.0.0.1:{}", server.port());
    let child = common::spawn_run(
        &[
            "--url",
            &url,
            "--tune-server",
            "--writer-sizes",
            "1M",
            "--repeat",
            "20",
            "--gap",
            "100ms",
        ],
        &out,
    );
    std::thread::sleep(Duration::from_millis(1200));
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("ops")
        .arg("-config")
        .query(&mut conn)
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_ne!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("could not restore the server's settings"),
        "{stderr}"
    );
    let meta = common::read_json(&out.join("run.json"));
    assert_eq!(meta["status"], "failed", "{meta}");
    assert!(
        meta["status_reason"]
            .as_str()
            .is_some_and(|r| r.contains("could not restore the server's settings")),
        "{meta}"
    );
    // Put back by hand, as the warning says.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(&before[1])
        .query(&mut conn)
        .unwrap();
}

/// A setting someone else changed during the run is left as found and not said to be restored
/// (trial 37, J7: a server restarted mid-run with values of its own read "server settings
/// changed for the run and restored: ..." for the four settings the run had left).
#[test]
fn a_setting_changed_by_someone_else_is_not_said_restored() {
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    let child = Command::new(assert_cmd::cargo::cargo_bin("probe"))
        .args([
            "--url",
            &server.url(),
            "--tune-server",
            "--writer-sizes",
            "1M",
        ])
        .args(["--repeat", "15", "--gap", "100ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(1000));
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg("20000")
        .query(&mut conn)
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.contains("left slowlog-log-slower-than at 20000"),
        "{text}"
    );
    let restored = text
        .lines()
        .find(|l| l.contains("changed for the run and restored"))
        .unwrap_or_default();
    assert!(!restored.contains("slowlog-log-slower-than"), "{text}");
    assert!(restored.contains("latency-monitor-threshold"), "{text}");
}
