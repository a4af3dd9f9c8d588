//! `kill -9` of the tool left its key and the settings `--tune-server` changed on someone
//! else's server, with nothing to say they were the tool's. A run now writes a marker (with a
//! lease it renews) before it changes anything: `probe clean` and the next run against the
//! same server find a dead run's marker once its lease has lapsed, put its settings back, remove
//! its keys and say so; a live run's marker is left alone.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{TestServer, probe_cmd};

/// The settings `--tune-server` changes for a writer run.
const TUNED: [&str; 4] = [
    "slowlog-log-slower-than",
    "slowlog-max-len",
    "latency-monitor-threshold",
    "notify-keyspace-events",
];

fn config_get(server: &TestServer, name: &str) -> String {
    let pairs: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(&mut server.conn())
        .unwrap();
    pairs[1].clone()
}

/// `probe clean --url` against `server`, which must succeed: its stdout and stderr.
fn clean(server: &TestServer) -> String {
    clean_from(server, None)
}

/// The same from another machine: another `XDG_STATE_HOME` (another marker key) when given.
fn clean_from(server: &TestServer, state_home: Option<&std::path::Path>) -> String {
    let mut cmd = probe_cmd();
    if let Some(home) = state_home {
        cmd.env("XDG_STATE_HOME", home);
    }
    let output = cmd
        .args(["clean", "--url", &server.url()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{text}");
    text
}

fn settings(server: &TestServer) -> Vec<String> {
    TUNED.iter().map(|name| config_get(server, name)).collect()
}

/// A probe run against `server` that writes for a minute; returns once it has started (its
/// `run ` line), its stderr drained meanwhile.
fn start_run(server: &TestServer, extra: &[&str]) -> Child {
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("probe"))
        .args(["--url", &server.url(), "--duration", "60s"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        let read = reader.read_line(&mut line).unwrap();
        assert!(read > 0, "the run ended before it started");
        if line.starts_with("run ") {
            break;
        }
    }
    thread::spawn(move || {
        let mut sink = String::new();
        while reader.read_line(&mut sink).unwrap_or(0) > 0 {
            sink.clear();
        }
    });
    child
}

/// The marker of the run whose process is `pid`: its key and JSON.
fn marker_of(server: &TestServer, pid: u32) -> Option<(String, serde_json::Value)> {
    let mut conn = server.conn();
    for key in server.keys("holprobe:*:marker") {
        let text: Option<String> = redis::cmd("GET").arg(&key).query(&mut conn).unwrap();
        let Some(text) = text else { continue };
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        if json["pid"].as_u64() == Some(u64::from(pid)) {
            return Some((key, json));
        }
    }
    None
}

/// Waits until `check` holds (panics after `limit`).
fn wait_for(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// Kills a run with SIGKILL once its writer's first key is there and the settings are changed;
/// returns its marker's key and the run's key prefix.
fn kill_9_mid_run(server: &TestServer, child: &mut Child, original: &[String]) -> (String, String) {
    let pid = child.id();
    let (marker, json) = marker_of(server, pid).expect("a marker written at the start");
    let prefix = json["key_prefix"].as_str().unwrap().to_string();
    wait_for(Duration::from_secs(20), "a value written", || {
        !server.keys(&format!("{prefix}w*")).is_empty()
    });
    assert_ne!(settings(server), original, "--tune-server changed nothing");
    let settings_in_marker: Vec<&str> = json["settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(
        settings_in_marker.contains(&"slowlog-log-slower-than"),
        "{json}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    (marker, prefix)
}

fn lease_lapsed(server: &TestServer, prefix: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS")
        .arg(format!("{prefix}lease"))
        .query(&mut server.conn())
        .unwrap();
    n == 0
}

#[test]
fn probe_clean_undoes_a_killed_run_and_leaves_a_live_one_alone() {
    let server = TestServer::start(&[]);
    let original = settings(&server);
    // A run that lives through the whole test, changing nothing but its own keys.
    let mut live = start_run(&server, &["--writer-sizes", "1M", "--repeat", "500"]);
    let (live_marker, live_json) = marker_of(&server, live.id()).expect("the live run's marker");
    let live_prefix = live_json["key_prefix"].as_str().unwrap().to_string();

    let mut killed = start_run(
        &server,
        &["--tune-server", "--writer-sizes", "16M", "--repeat", "500"],
    );
    let (marker, prefix) = kill_9_mid_run(&server, &mut killed, &original);
    // Its marker and lease at least.
    assert!(!server.keys(&format!("{prefix}*")).is_empty());

    // Before its lease lapses, the killed run looks alive: left alone.
    let early_out = clean(&server);
    assert!(early_out.contains("its lease is fresh"), "{early_out}");
    assert!(!early_out.contains("without cleaning up"), "{early_out}");
    assert_ne!(settings(&server), original);
    // A run started meanwhile says that other runs are under way, whose settings are in
    // effect for it too (it said nothing, and ran on the killed run's settings).
    let during = probe_cmd()
        .args(["--url", &server.url(), "--duration", "1s"])
        .output()
        .unwrap();
    let during_err = String::from_utf8_lossy(&during.stderr);
    assert!(during.status.success(), "{during_err}");
    let said = during_err
        .lines()
        .filter(|l| l.contains("another run of the tool on this server"))
        .count();
    assert_eq!(said, 2, "{during_err}");

    wait_for(
        Duration::from_secs(20),
        "the killed run's lease lapsed",
        || lease_lapsed(&server, &prefix),
    );
    let (text, said) = reclaiming_run(&["clean", "--url", &server.url()], &prefix);
    let said: Vec<&str> = said.iter().map(String::as_str).collect();
    assert!(
        said[0].contains(&format!(
            "restored slowlog-log-slower-than 0 -> {}",
            original[0]
        )),
        "{text}"
    );
    assert!(
        said[0].contains(&format!("key(s) under {prefix}")),
        "{text}"
    );
    assert_eq!(settings(&server), original, "{text}");
    assert!(
        server.keys(&format!("{prefix}*")).is_empty(),
        "left: {:?}",
        server.keys(&format!("{prefix}*"))
    );
    let registered: Vec<String> = redis::cmd("SMEMBERS")
        .arg("holprobe:markers")
        .query(&mut server.conn())
        .unwrap();
    assert!(!registered.contains(&marker), "{registered:?}");

    // The live run: its marker, lease and keys untouched, and said to be alive.
    let live_id = live_prefix
        .trim_start_matches("holprobe:")
        .trim_end_matches(':');
    assert!(
        text.lines()
            .any(|l| l.contains(live_id) && l.contains("its lease is fresh")),
        "{text}"
    );
    assert!(registered.contains(&live_marker), "{registered:?}");
    assert!(marker_of(&server, live.id()).is_some());
    assert!(!lease_lapsed(&server, &live_prefix));

    // Its own end removes its marker with its keys.
    // SAFETY: kill(2) on a child we started.
    unsafe {
        libc::kill(live.id() as libc::pid_t, libc::SIGINT);
    }
    live.wait().unwrap();
    assert!(
        server.keys(&format!("{live_prefix}*")).is_empty(),
        "left: {:?}",
        server.keys(&format!("{live_prefix}*"))
    );
    assert!(
        server.keys("holprobe:*").is_empty(),
        "{:?}",
        server.keys("holprobe:*")
    );
}

#[test]
fn the_next_run_undoes_a_killed_run_and_says_so() {
    let server = TestServer::start(&[]);
    let original = settings(&server);
    let mut killed = start_run(
        &server,
        &["--tune-server", "--writer-sizes", "16M", "--repeat", "500"],
    );
    let (_, prefix) = kill_9_mid_run(&server, &mut killed, &original);
    // Someone changes one of the settings after the kill: it stays as they set it.
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-max-len")
        .arg("4321")
        .query::<()>(&mut server.conn())
        .unwrap();
    wait_for(
        Duration::from_secs(20),
        "the killed run's lease lapsed",
        || lease_lapsed(&server, &prefix),
    );
    let (text, said) = reclaiming_run(&["--url", &server.url(), "--writer-sizes", "1M"], &prefix);
    let said: Vec<&str> = said.iter().map(String::as_str).collect();
    assert!(
        said[0].contains("left slowlog-max-len at 4321"),
        "{}",
        said[0]
    );
    let now = settings(&server);
    assert_eq!(now[0], original[0], "{text}");
    assert_eq!(now[1], "4321", "{text}");
    assert_eq!(now[2..], original[2..], "{text}");
    assert!(
        server.keys("holprobe:*").is_empty(),
        "{:?}",
        server.keys("holprobe:*")
    );
}

/// Runs `probe ARGS` after a run under `prefix` died; it must succeed and say one line about the
/// dead run. Returns everything it printed and that line (in a list of one).
fn reclaiming_run(args: &[&str], prefix: &str) -> (String, Vec<String>) {
    let output = probe_cmd().args(args).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{text}");
    let run_id = prefix.trim_start_matches("holprobe:").trim_end_matches(':');
    let said: Vec<String> = text
        .lines()
        .filter(|l| l.contains(run_id) && l.contains("ended without cleaning up"))
        .map(str::to_string)
        .collect();
    assert_eq!(said.len(), 1, "one line for the dead run: {text}");
    (text, said)
}

/// A marker planted by a client that may write under the tool's namespace (the hostile trial's:
/// a user limited to `holprobe:*` keys) is not acted on: neither `probe clean` nor the next run
/// deletes the keys it names outside its prefix or sets a setting the tool never changes; both
/// say why they left it.
#[test]
fn a_planted_marker_is_left_alone() {
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    let _: () = redis::cmd("SET")
        .arg("owner:precious")
        .arg("1")
        .query(&mut conn)
        .unwrap();
    let maxmemory = config_get(&server, "maxmemory");
    let policy = config_get(&server, "maxmemory-policy");
    let planted = serde_json::json!({
        "run_id": "0badf00d",
        "key_prefix": "holprobe:0badf00d:",
        "keys": ["owner:precious"],
        "settings": [
            {"name": "maxmemory", "old": "1", "new": maxmemory},
            {"name": "maxmemory-policy", "old": "allkeys-random", "new": policy},
        ],
        "started_unix_s": 1,
        "host": "vm",
        "pid": 1
    });
    common::plant_marker(&mut conn, &planted, &[]);
    for args in [
        vec!["clean", "--url", &server.url()],
        vec!["--url", &server.url(), "--duration", "1s"],
    ] {
        let output = probe_cmd().args(&args).output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout).to_string()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{args:?}: {text}");
        assert!(
            text.contains("left holprobe:0badf00d:marker alone: it is not a marker the tool wrote"),
            "{args:?}: {text}"
        );
        let value: Option<String> = redis::cmd("GET")
            .arg("owner:precious")
            .query(&mut conn)
            .unwrap();
        assert_eq!(value.as_deref(), Some("1"), "{args:?}: {text}");
        assert_eq!(config_get(&server, "maxmemory"), maxmemory, "{args:?}");
        assert_eq!(config_get(&server, "maxmemory-policy"), policy, "{args:?}");
    }
}

/// A dead run's marker in another database than the one `probe clean` is given is found and
/// undone there too: the settings it changed are the whole server's (trial 37, J3: a run on
/// `/3` killed with -9 was invisible to `probe clean` on db 0, which said none was left).
#[test]
fn a_dead_run_in_another_database_is_undone() {
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    let before = config_get(&server, "slowlog-max-len");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-max-len")
        .arg("16384")
        .query(&mut conn)
        .unwrap();
    let marker = serde_json::json!({
        "run_id": "0badf00d", "key_prefix": "holprobe:0badf00d:",
        "keys": ["holprobe:0badf00d:w:1"],
        "settings": [{"name": "slowlog-max-len", "old": before, "new": "16384"}],
        "started_unix_s": 1, "host": "vm", "pid": 1
    });
    let _: () = redis::cmd("SELECT").arg(3).query(&mut conn).unwrap();
    common::plant_sealed_marker(&mut conn, &marker, &["holprobe:0badf00d:w:1"]);
    let text = clean(&server);
    assert!(
        text.contains("db 3: run 0badf00d") && text.contains("ended without cleaning up"),
        "{text}"
    );
    assert_eq!(config_get(&server, "slowlog-max-len"), before, "{text}");
    let left: i64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
    assert_eq!(left, 0, "db 3 still holds the run's keys: {text}");
}

/// A planted marker naming only the observability settings a run changes, but with values no
/// run would have recorded: undoing it would put `slowlog-max-len` "back" to a trillion and
/// `slowlog-log-slower-than` to 0, so that the server logs every command without end. Such a
/// marker is left alone, and the settings stay as the owner had them.
#[test]
fn a_planted_marker_of_observability_settings_no_run_would_set_is_left_alone() {
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    let max_len = config_get(&server, "slowlog-max-len");
    let slower_than = config_get(&server, "slowlog-log-slower-than");
    let planted = serde_json::json!({
        "run_id": "0badf00e",
        "key_prefix": "holprobe:0badf00e:",
        "keys": [],
        "settings": [
            {"name": "slowlog-max-len", "old": "1000000000000", "new": max_len},
            {"name": "slowlog-log-slower-than", "old": "0", "new": slower_than},
        ],
        "started_unix_s": 1,
        "host": "vm",
        "pid": 1
    });
    common::plant_marker(&mut conn, &planted, &[]);
    let text = clean(&server);
    assert!(
        text.contains(&format!("left slowlog-max-len at {max_len} (the marker says the run set it from 1000000000000, but no run sets slowlog-max-len")),
        "{text}"
    );
    assert_eq!(config_get(&server, "slowlog-max-len"), max_len);
    assert_eq!(config_get(&server, "slowlog-log-slower-than"), slower_than);
}

/// A planted marker whose changes are ones a run could make (`notify-keyspace-events` from `AK`
/// to `AKE`, which reads back as the owner's own `KEA`; `slowlog-log-slower-than` from `-1` to
/// the owner's 5000) would have turned the owner's key-event notifications and slow log off
/// (hostile review, F1). Only a marker this machine sealed is acted on: the planted one's
/// settings are left, and said with the command that would put each back.
#[test]
fn a_planted_marker_of_changes_a_run_could_make_is_only_said() {
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    common::config_set(&mut conn, "notify-keyspace-events", "KEA");
    common::config_set(&mut conn, "slowlog-log-slower-than", "5000");
    let planted = serde_json::json!({
        "run_id": "0badf00f",
        "key_prefix": "holprobe:0badf00f:",
        "keys": ["holprobe:0badf00f:w:1"],
        "settings": [
            {"name": "notify-keyspace-events", "old": "AK", "new": "AKE"},
            {"name": "slowlog-log-slower-than", "old": "-1", "new": "5000"},
        ],
        "started_unix_s": 1,
        "host": "vm",
        "pid": 1
    });
    common::plant_marker(&mut conn, &planted, &["holprobe:0badf00f:w:1"]);
    let text = clean(&server);
    assert!(
        text.contains("this machine did not seal the marker (it carries no seal; written on vm)")
            && text
                .contains("`CONFIG SET notify-keyspace-events AK` puts it back if that run set it")
            && text.contains("`CONFIG SET slowlog-log-slower-than -1` puts it back"),
        "{text}"
    );
    assert_eq!(config_get(&server, "notify-keyspace-events"), "AKE");
    assert_eq!(config_get(&server, "slowlog-log-slower-than"), "5000");
    // Its keys lie under its own prefix: those are removed. The marker is kept for a machine
    // that may have sealed it, and said.
    let exists = |conn: &mut redis::Connection, key: &str| -> bool {
        redis::cmd("EXISTS").arg(key).query::<i64>(conn).unwrap() == 1
    };
    assert!(!exists(&mut conn, "holprobe:0badf00f:w:1"), "{text}");
    assert!(exists(&mut conn, "holprobe:0badf00f:marker"), "{text}");
    assert!(
        text.contains("kept its marker for the machine that sealed it"),
        "{text}"
    );
    // The same marker sealed here (a run of this machine's, killed) is undone, and forgotten.
    common::plant_sealed_marker(&mut conn, &planted, &[]);
    let text = clean(&server);
    assert_eq!(
        config_get(&server, "notify-keyspace-events"),
        "AK",
        "{text}"
    );
    assert_eq!(
        config_get(&server, "slowlog-log-slower-than"),
        "-1",
        "{text}"
    );
    assert!(!exists(&mut conn, "holprobe:0badf00f:marker"), "{text}");
}

/// A run killed on one machine, cleaned from another (here: another key, XDG_STATE_HOME): the
/// other leaves its settings, says them, and keeps its marker, so that the machine that sealed
/// it still puts them back (the hostile review's second clean found nothing, the server left
/// logging every command). And a copy of that sealed marker planted again once it was undone
/// (taken while the run went) is not acted on: a seal is good once.
#[test]
fn a_sealed_marker_is_undone_by_its_machine_only_and_only_once() {
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    let before = config_get(&server, "slowlog-log-slower-than");
    common::config_set(&mut conn, "slowlog-log-slower-than", "0");
    let marker = serde_json::json!({
        "run_id": format!("{:08x}", std::process::id()),
        "key_prefix": format!("holprobe:{:08x}:", std::process::id()),
        "keys": [],
        "settings": [{"name": "slowlog-log-slower-than", "old": before, "new": "0"}],
        "started_unix_s": 1, "host": "vm", "pid": 1
    });
    common::plant_sealed_marker(&mut conn, &marker, &[]);
    let copy: String = redis::cmd("GET")
        .arg(format!("{}marker", marker["key_prefix"].as_str().unwrap()))
        .query(&mut conn)
        .unwrap();

    let elsewhere = tempfile::tempdir().unwrap();
    let text = clean_from(&server, Some(elsewhere.path()));
    assert!(
        text.contains("its seal is not of this machine's key")
            && text.contains("kept its marker for the machine that sealed it"),
        "{text}"
    );
    assert_eq!(config_get(&server, "slowlog-log-slower-than"), "0");

    let text = clean(&server);
    assert!(
        text.contains(&format!("restored slowlog-log-slower-than 0 -> {before}")),
        "{text}"
    );
    assert_eq!(config_get(&server, "slowlog-log-slower-than"), before);

    // The owner sets it to 0 themselves; the copy is planted again.
    common::config_set(&mut conn, "slowlog-log-slower-than", "0");
    common::plant_marker(&mut conn, &serde_json::from_str(&copy).unwrap(), &[]);
    let text = clean(&server);
    assert!(
        text.contains("ended or was undone before: a copy of an old marker"),
        "{text}"
    );
    assert_eq!(
        config_get(&server, "slowlog-log-slower-than"),
        "0",
        "{text}"
    );
}

/// A marker sealed here but written on another server process (a copy planted on a second
/// server, the slot's new master after a failover, a restart since: CONFIG SET outlives none of
/// them) has no settings to put back on this one: said, not acted on.
#[test]
fn a_sealed_marker_of_another_server_process_is_not_acted_on() {
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    let before = config_get(&server, "slowlog-log-slower-than");
    common::config_set(&mut conn, "slowlog-log-slower-than", "0");
    let id = format!("{:08x}", std::process::id() ^ 0x5a5a_5a5a);
    let marker = serde_json::json!({
        "run_id": id,
        "key_prefix": format!("holprobe:{id}:"),
        "keys": [],
        "settings": [{"name": "slowlog-log-slower-than", "old": before, "new": "0"}],
        "started_unix_s": 1, "host": "vm", "pid": 1,
        "server_run_id": "0123456789abcdef0123456789abcdef01234567"
    });
    common::plant_sealed_marker(&mut conn, &marker, &[]);
    let text = clean(&server);
    assert!(
        text.contains("it was written on another server process"),
        "{text}"
    );
    assert_eq!(
        config_get(&server, "slowlog-log-slower-than"),
        "0",
        "{text}"
    );
}
