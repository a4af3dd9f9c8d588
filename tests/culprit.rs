//! The server-log poller and the stall naming against real servers: a named client's DEBUG SLEEP
//! and a busy Lua script are read from SLOWLOG (COMMANDLOG on Valkey) and named for the
//! wall-clock span they took; missed entries are counted; refused commands keep it quiet.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{TestServer, config_set};
use holprobe::measure::culprit::{
    CommandLogSource, LoopWindow, ServerCommandEntry, ServerLogPoller, WallSpan, eventloop_label,
    name_stall,
};
use holprobe::measure::serverview::LatencyEvent;
use holprobe::measure::target::ConnInfo;

/// A pure Lua loop of `ARGV[1]` steps. No server call inside: on Valkey 9.1 a loop that waited
/// for `redis.call('TIME')` to pass 30 ms ran for 5 s (the time a script sees stands still while
/// it runs, until the busy-script threshold), so the steps are calibrated instead.
const BUSY_SCRIPT: &str =
    "local n = tonumber(ARGV[1]) local x = 0 for i = 1, n do x = x + i % 7 end return 1";

/// Steps of [`BUSY_SCRIPT`] that keep this server busy for about `target_us`: the quickest of
/// three runs of a size that takes some ms, scaled (on a loaded machine one run can take ten
/// times as long as the next, and a slow calibration makes a script too short to name).
fn busy_steps(conn: &mut redis::Connection, target_us: i64) -> u64 {
    let mut steps: u64 = 100_000;
    loop {
        let quickest_us = (0..3)
            .map(|_| {
                timed(conn, redis::cmd("EVAL").arg(BUSY_SCRIPT).arg(0).arg(steps)).duration_us()
            })
            .min()
            .unwrap();
        if quickest_us >= 5_000 || steps >= 1 << 32 {
            return (steps as f64 * target_us as f64 / quickest_us.max(1) as f64) as u64;
        }
        steps *= 10;
    }
}

fn unix_us(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH).unwrap().as_micros() as i64
}

/// Runs `command` on `conn` and returns the wall-clock span it took, as a client sees it.
fn timed(conn: &mut redis::Connection, command: &redis::Cmd) -> WallSpan {
    let start = SystemTime::now();
    command.exec(conn).expect("the command runs");
    let end = SystemTime::now();
    WallSpan {
        start_unix_us: unix_us(start),
        end_unix_us: unix_us(end),
    }
}

/// Sleeps into the next wall-clock second (20 ms past its start).
fn wait_for_next_second() {
    let into_second_us = unix_us(SystemTime::now()).rem_euclid(1_000_000);
    std::thread::sleep(Duration::from_micros(
        (1_000_000 - into_second_us + 20_000) as u64,
    ));
}

/// Everything the poller found over several polls.
#[derive(Default)]
struct Gathered {
    entries: Vec<ServerCommandEntry>,
    events: Vec<LatencyEvent>,
    missed: u64,
}

impl Gathered {
    /// Polls once; returns what this poll found.
    fn poll(&mut self, poller: &mut ServerLogPoller) -> Vec<ServerCommandEntry> {
        let poll = poller.poll().expect("a poll");
        self.entries.extend(poll.entries.iter().cloned());
        self.events.extend(poll.latency);
        self.missed += poll.missed_entries;
        poll.entries
    }
}

/// The entries of one command. Others may be there too: with a 1 ms threshold on a busy
/// 2-core machine, any command the scheduler interrupts can be logged.
fn only<'a>(entries: &'a [ServerCommandEntry], command: &str) -> Vec<&'a ServerCommandEntry> {
    entries
        .iter()
        .filter(|e| holprobe::analyze::naming::is_command(&e.args, command))
        .collect()
}

/// The main scenario on one server: a DEBUG SLEEP logged before the poller started is not
/// returned; a named client's DEBUG SLEEP 0.05 and busy EVAL are, and each is named for its own
/// span, with a SLOWLOG RESET by another client in between.
fn names_sleep_and_script(server: &TestServer, expected_source: CommandLogSource) {
    let info: ConnInfo = server.server.conn_info();
    let mut admin = server.conn();
    config_set(&mut admin, "slowlog-log-slower-than", "1000");
    config_set(&mut admin, "slowlog-max-len", "128");
    config_set(&mut admin, "latency-monitor-threshold", "1");
    let steps = busy_steps(&mut admin, 30_000);
    // The calibration's own latency samples are not the run's.
    redis::cmd("LATENCY").arg("RESET").exec(&mut admin).unwrap();
    // History from before the run: not the poller's business.
    redis::cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.02")
        .exec(&mut admin)
        .unwrap();

    let mut poller = ServerLogPoller::connect(&info).expect("the poller connects");
    assert_eq!(poller.source(), Some(expected_source));
    assert!(poller.reads_latency());
    assert_eq!(poller.take_notes(), Vec::<String>::new());
    let mut gathered = Gathered::default();
    assert!(
        only(&gathered.poll(&mut poller), "DEBUG").is_empty(),
        "nothing new yet"
    );

    let mut app = server.conn();
    redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("culprit-test")
        .exec(&mut app)
        .unwrap();
    let sleep_span = timed(&mut app, redis::cmd("DEBUG").arg("SLEEP").arg("0.05"));
    let first = gathered.poll(&mut poller);
    // The sleep logged before the poller started is not among them.
    let sleeps = only(&first, "DEBUG");
    assert_eq!(sleeps.len(), 1, "{first:?}");
    let sleep = sleeps[0];
    assert_eq!(sleep.args[2], b"0.05");
    assert!(
        (45_000..1_000_000).contains(&sleep.duration_us),
        "{sleep:?}"
    );
    assert_eq!(sleep.client_name.as_deref(), Some("culprit-test"));

    // Another client empties the log: the ids go on, the poller is not confused.
    redis::cmd("SLOWLOG").arg("RESET").exec(&mut admin).unwrap();
    // The script in a second of its own: in the sleep's second both would be candidates for
    // either span, and on a loaded machine the script may take as long as the sleep (the
    // unit tests cover that case).
    wait_for_next_second();
    let script_span = timed(
        &mut app,
        redis::cmd("EVAL").arg(BUSY_SCRIPT).arg(0).arg(steps),
    );
    let second = gathered.poll(&mut poller);
    assert_eq!(only(&second, "EVAL").len(), 1, "{second:?}");
    assert!(only(&second, "DEBUG").is_empty(), "{second:?}");
    assert!(
        second.iter().all(|e| e.id > sleep.id),
        "ids keep growing: {first:?} then {second:?}"
    );
    let third = gathered.poll(&mut poller);
    assert!(only(&third, "EVAL").is_empty() && only(&third, "DEBUG").is_empty());
    assert_eq!(gathered.missed, 0);
    assert_eq!(poller.missed_entries(), 0);
    assert_eq!(poller.take_notes(), Vec::<String>::new());

    let culprit = name_stall(sleep_span, &gathered.entries, &gathered.events);
    assert_eq!(culprit.server_command.as_deref(), Some("DEBUG SLEEP 0.05"));
    let client = culprit.server_client.expect("a client");
    assert!(
        client.starts_with("127.0.0.1:") && client.ends_with(" culprit-test"),
        "{client}"
    );
    let event = culprit.server_event.expect("a latency event");
    assert!(event.contains("command "), "{event}");

    let culprit = name_stall(script_span, &gathered.entries, &gathered.events);
    let command = culprit.server_command.unwrap_or_else(|| {
        panic!(
            "the script is not named for {script_span:?} ({} µs): {:?}",
            script_span.duration_us(),
            only(&gathered.entries, "EVAL")
        )
    });
    assert!(
        command.starts_with(&format!("EVAL \"local n = tonumber(...\" 0 {steps}")),
        "{command}"
    );
    assert!(command.chars().count() <= 44, "{command}");
    assert!(
        culprit
            .server_client
            .is_some_and(|c| c.ends_with(" culprit-test"))
    );

    let event = culprit.server_event.expect("the script's latency event");
    assert!(event.starts_with("command "), "{event}");

    // The same stall ten seconds later names nothing.
    let later = WallSpan {
        start_unix_us: sleep_span.start_unix_us + 10_000_000,
        end_unix_us: sleep_span.end_unix_us + 10_000_000,
    };
    let culprit = name_stall(later, &gathered.entries, &gathered.events);
    assert_eq!(culprit.server_command, None);
    assert_eq!(culprit.server_event, None);
}

#[test]
fn redis_7_sleep_and_script_are_named() {
    let server = TestServer::start(&[]);
    names_sleep_and_script(&server, CommandLogSource::Slowlog);
}

#[test]
fn valkey_9_sleep_and_script_are_named_from_commandlog() {
    let Some(bin) = common::server("valkey-9.1") else {
        return; // the reason is printed
    };
    let server = TestServer::start_bin(Some(&bin), &[]);
    names_sleep_and_script(&server, CommandLogSource::Commandlog);
}

#[test]
fn redis_6_sleep_and_script_are_named() {
    let Some(bin) = common::server("redis-6.2") else {
        return;
    };
    let server = TestServer::start_bin(Some(&bin), &[]);
    names_sleep_and_script(&server, CommandLogSource::Slowlog);
}

/// Redis 8.2 has no COMMANDLOG (Valkey's): the poller falls back to SLOWLOG.
#[test]
fn redis_8_sleep_and_script_are_named() {
    let Some(bin) = common::server("redis-8.2") else {
        return;
    };
    let server = TestServer::start_bin(Some(&bin), &[]);
    names_sleep_and_script(&server, CommandLogSource::Slowlog);
}

/// A server that logs every command (`slowlog-log-slower-than 0`, as a run with writes sets
/// it): the poller passes over the flood of fast entries (not counted as missed), and reads the
/// log back after a command the LATENCY monitor timed at 10 ms or more, keeping its slow
/// entries: another client's DEBUG SLEEP 0.05 among 3,000 PINGs is returned, the PINGs are not.
/// (The hostile trial: with --tune-server a foreign DEBUG SLEEP 0.2 read "399 probes delayed".)
#[test]
fn a_log_of_every_command_is_read_back_after_a_slow_one_only() {
    let server = TestServer::start(&[]);
    let info: ConnInfo = server.server.conn_info();
    let mut admin = server.conn();
    config_set(&mut admin, "slowlog-log-slower-than", "0");
    config_set(&mut admin, "slowlog-max-len", "16384");
    config_set(&mut admin, "latency-monitor-threshold", "1");
    let pings = |conn: &mut redis::Connection, n: usize| {
        let mut pipe = redis::pipe();
        for _ in 0..n {
            pipe.cmd("PING");
        }
        pipe.exec(conn).unwrap();
    };
    let mut poller = ServerLogPoller::connect_to_a_log_of_every_command(&info).expect("connects");
    let mut gathered = Gathered::default();
    pings(&mut admin, 3000);
    assert!(
        gathered.poll(&mut poller).is_empty(),
        "fast entries passed over"
    );
    assert_eq!(gathered.missed, 0);
    let mut app = server.conn();
    let sleep_span = timed(&mut app, redis::cmd("DEBUG").arg("SLEEP").arg("0.05"));
    pings(&mut admin, 3000);
    let found = gathered.poll(&mut poller);
    let sleeps = only(&found, "DEBUG");
    assert_eq!(sleeps.len(), 1, "{found:?}");
    assert!(
        found.iter().all(|e| e.duration_us >= 1000),
        "only slow entries: {found:?}"
    );
    assert_eq!(gathered.missed, 0);
    let culprit = name_stall(sleep_span, &gathered.entries, &gathered.events);
    assert_eq!(culprit.server_command.as_deref(), Some("DEBUG SLEEP 0.05"));
    // Nothing slow since: the next poll reads nothing back.
    pings(&mut admin, 1000);
    assert!(gathered.poll(&mut poller).is_empty());
}

#[test]
fn entries_dropped_before_a_poll_are_counted_as_missed() {
    let server = TestServer::start(&[]);
    let mut admin = server.conn();
    // 10 ms: a command the scheduler interrupts on a busy machine is not logged as well.
    config_set(&mut admin, "slowlog-log-slower-than", "10000");
    config_set(&mut admin, "slowlog-max-len", "2");
    let sleep = |conn: &mut redis::Connection| {
        redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.02")
            .exec(conn)
            .unwrap()
    };
    // The poller starts from a log that holds an entry: gaps are counted from its id.
    sleep(&mut admin);
    let mut poller = ServerLogPoller::connect(&server.server.conn_info()).unwrap();
    for _ in 0..5 {
        sleep(&mut admin);
    }
    let poll = poller.poll().unwrap();
    assert_eq!(poll.entries.len(), 2, "the log holds 2");
    assert_eq!(poll.missed_entries, 3);
    // One more, wiped by someone's RESET before the poll, then two: one missed.
    sleep(&mut admin);
    redis::cmd("SLOWLOG").arg("RESET").exec(&mut admin).unwrap();
    sleep(&mut admin);
    sleep(&mut admin);
    let poll = poller.poll().unwrap();
    assert_eq!(poll.entries.len(), 2);
    assert_eq!(poll.missed_entries, 1);
    assert_eq!(poller.missed_entries(), 4);

    // More than a page at once: one page is read, the rest counted.
    config_set(&mut admin, "slowlog-max-len", "1000");
    config_set(&mut admin, "slowlog-log-slower-than", "0");
    let mut pipe = redis::pipe();
    for _ in 0..300 {
        pipe.cmd("PING");
    }
    pipe.exec(&mut admin).unwrap();
    let poll = poller.poll().unwrap();
    assert_eq!(poll.entries.len(), holprobe::measure::culprit::POLL_PAGE);
    assert!(poll.missed_entries >= 300 - 128, "{}", poll.missed_entries);
    let ids: Vec<i64> = poll.entries.iter().map(|e| e.id).collect();
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1),
        "oldest first, no gaps: {ids:?}"
    );
}

#[test]
fn a_server_that_refuses_the_logs_keeps_the_poller_quiet() {
    // Renamed away (COMMANDLOG does not exist on Redis 7.0).
    let server = TestServer::start(&["rename-command SLOWLOG \"\"", "rename-command LATENCY \"\""]);
    let mut poller = ServerLogPoller::connect(&server.server.conn_info()).expect("connects");
    assert_eq!(poller.source(), None);
    assert!(!poller.reads_latency());
    let notes = poller.take_notes();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(
        notes[0].contains("SLOWLOG") && notes[0].contains("COMMANDLOG"),
        "{notes:?}"
    );
    assert!(notes[1].contains("LATENCY"), "{notes:?}");
    let mut admin = server.conn();
    redis::cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.01")
        .exec(&mut admin)
        .unwrap();
    for _ in 0..3 {
        let poll = poller.poll().expect("a quiet poll is not an error");
        assert!(poll.entries.is_empty() && poll.latency.is_empty());
    }
    assert!(poller.take_notes().is_empty(), "each note is said once");

    // Denied by ACL for the poller's user.
    let server = TestServer::start(&[]);
    let mut admin = server.conn();
    redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "watcher",
            "on",
            ">watcher-pw",
            "~*",
            "+@all",
            "-slowlog",
            "-latency",
        ])
        .exec(&mut admin)
        .unwrap();
    let mut info = server.server.conn_info();
    info.username = Some("watcher".into());
    info.password = Some("watcher-pw".into());
    let mut poller = ServerLogPoller::connect(&info).expect("connects");
    assert_eq!((poller.source(), poller.reads_latency()), (None, false));
    let notes = poller.take_notes();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[0].contains("NOPERM"), "{notes:?}");
    assert!(poller.poll().unwrap().entries.is_empty());
    std::thread::sleep(Duration::from_millis(10));
    assert!(poller.take_notes().is_empty());
}

/// The event loop's longest cycle per poll (INFO DEBUG, Valkey and Redis 7.2+): with resets
/// after each reading, a poll's figure is the longest cycle since the previous poll, so the
/// 50 ms DEBUG SLEEP shows in the poll after it and not in the next one; the stall it made is
/// labelled with it, and a stall the server had no part in gets the short cycle that says so.
#[test]
fn valkey_9_event_loop_worst_is_read_per_poll_and_labels_the_stall() {
    let Some(bin) = common::server("valkey-9.1") else {
        return;
    };
    let server = TestServer::start_bin(Some(&bin), &[]);
    let conn = ConnInfo::loopback(server.port());
    let mut poller = ServerLogPoller::connect(&conn)
        .expect("the poller connects")
        .resetting_stats();
    let mut app = server.conn();
    let before = unix_us(SystemTime::now());
    let first = poller.poll().expect("a poll");
    let sleep = timed(&mut app, redis::cmd("DEBUG").arg("SLEEP").arg("0.05"));
    let after_sleep = unix_us(SystemTime::now());
    let second = poller.poll().expect("a poll");
    std::thread::sleep(Duration::from_millis(100));
    let after_quiet = unix_us(SystemTime::now());
    let third = poller.poll().expect("a poll");
    let slept = second
        .eventloop_max_us
        .expect("Valkey reports the event loop");
    assert!((50_000..200_000).contains(&slept), "{slept} µs");
    for quiet in [first.eventloop_max_us, third.eventloop_max_us] {
        let quiet = quiet.expect("each poll has a figure");
        assert!(quiet < 20_000, "a quiet poll window had a {quiet} µs cycle");
    }
    let windows = [
        LoopWindow {
            start_unix_us: before,
            end_unix_us: after_sleep,
            max_us: slept,
        },
        LoopWindow {
            start_unix_us: after_sleep,
            end_unix_us: after_quiet,
            max_us: third.eventloop_max_us.unwrap(),
        },
    ];
    let label = eventloop_label(sleep, &windows).expect("the sleep's stall is labelled");
    assert!(label.starts_with("event loop max 5"), "{label}");
    // A 30 ms silence in the quiet window: the server's loop was short all along.
    let host_stall = WallSpan {
        start_unix_us: after_sleep + 40_000,
        end_unix_us: after_sleep + 70_000,
    };
    let label = eventloop_label(host_stall, &windows[1..]).expect("labelled");
    // The quiet window's longest cycle, whatever a busy CI host made it (1.5 ms once), far
    // under the 30 ms silence: the label says the server's loop was short.
    let said_ms: f64 = label
        .strip_prefix("event loop max ")
        .and_then(|rest| rest.split("ms").next())
        .and_then(|ms| ms.trim().parse().ok())
        .unwrap_or_else(|| panic!("a figure in {label}"));
    assert!(said_ms < 20.0, "{label}");
    assert!(
        (said_ms - third.eventloop_max_us.unwrap() as f64 / 1e3).abs() < 0.1,
        "{label}: the quiet window's own figure"
    );
}

/// Redis 7.0 does not report the event loop's cycles: the poll says nothing of it.
#[test]
fn redis_7_0_has_no_event_loop_figure() {
    let server = TestServer::start(&[]);
    let mut poller = ServerLogPoller::connect(&ConnInfo::loopback(server.port()))
        .expect("the poller connects")
        .resetting_stats();
    assert_eq!(poller.poll().expect("a poll").eventloop_max_us, None);
}

/// A write's server figure is its own command's SLOWLOG entry, never an earlier one of the same
/// key: a run's second DEL of a key that the server did not log (faster than
/// `slowlog-log-slower-than`) took the first DEL's entry as its own before the view read the
/// newest id ahead of each write.
#[test]
fn a_write_the_server_did_not_log_gets_no_figure_of_an_earlier_one() {
    use holprobe::measure::resp::RawConn;
    use holprobe::measure::serverview::{ServerView, ViewSetup};
    let server = TestServer::start(&[]);
    let mut conn = server.conn();
    let key = "holprobe:test:twice";
    // The first DEL is logged (everything is, at 0).
    config_set(&mut conn, "slowlog-log-slower-than", "0");
    redis::cmd("SET").arg(key).arg("x").exec(&mut conn).unwrap();
    let mut raw = RawConn::connect(&server.server.conn_info()).expect("connect");
    let mut view = ServerView::new(ViewSetup {
        reset_stats: false,
        reset_latency: false,
        ..ViewSetup::default()
    });
    let before = view.before(&mut raw);
    raw.command(&[b"DEL", key.as_bytes()]).unwrap();
    let first = view.after(&mut raw, "DEL", key.as_bytes(), &before);
    assert!(first.exec_us.is_some(), "{first:?}");
    // The second is not (nothing is, at 10 s).
    config_set(&mut conn, "slowlog-log-slower-than", "10000000");
    redis::cmd("SET").arg(key).arg("x").exec(&mut conn).unwrap();
    let before = view.before(&mut raw);
    raw.command(&[b"DEL", key.as_bytes()]).unwrap();
    let second = view.after(&mut raw, "DEL", key.as_bytes(), &before);
    assert_eq!(second.exec_us, None, "{second:?}");
}

/// The warnings of a run (run.json) that say a write's stall was another client's command.
fn other_command_warnings(out: &std::path::Path) -> Vec<String> {
    let meta = common::read_json(&out.join("run.json"));
    meta["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .filter(|w| w.contains("another client's command"))
        .map(str::to_string)
        .collect()
}

/// A write's window that another client's slow command fell into is charged that command, as
/// others saw it, and the run says so (trial 36, G6: a DEL of 9 ms read 39.5 ms behind a
/// DEBUG SLEEP 0.03 with no word); a write whose stall the server logged as the run's own
/// command (its DEL of a big hash) is not flagged.
#[test]
fn a_write_s_stall_from_another_client_s_command_is_flagged() {
    let server = TestServer::start(&[]);
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();

    // The run's own freeze, logged by SLOWLOG as its DEL (over 10 ms): not flagged.
    let own = dir.path().join("own");
    let status = common::spawn_run(
        &[
            "--url",
            &url,
            "--type",
            "hash",
            "--elements",
            "200k",
            "--ops",
            "build,delete",
            "--repeat",
            "2",
            "--gap",
            "200ms",
        ],
        &own,
    )
    .wait_with_output()
    .unwrap();
    assert_eq!(
        status.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let stalls = common::read_csv(&own.join("stalls.csv"));
    assert!(
        stalls
            .iter()
            .any(|s| !s["write_seq"].is_empty() && s["server_command"].starts_with("DEL ")),
        "no write's stall named by its DEL: {stalls:?}"
    );
    assert_eq!(other_command_warnings(&own), Vec::<String>::new());

    // The same run while another client sleeps 30 ms every 70 ms: the builds, many commands
    // over a few hundred ms, wait behind its sleeps.
    let other = dir.path().join("other");
    let child = common::spawn_run(
        &[
            "--url",
            &url,
            "--type",
            "hash",
            "--elements",
            "200k",
            "--ops",
            "build,delete",
            "--repeat",
            "2",
            "--gap",
            "200ms",
        ],
        &other,
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let injector = {
        let stop = stop.clone();
        let mut conn = server.conn();
        std::thread::spawn(move || {
            let mut sleeps = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && sleeps < 200 {
                let _: () = redis::cmd("DEBUG")
                    .arg("SLEEP")
                    .arg("0.03")
                    .query(&mut conn)
                    .unwrap();
                sleeps += 1;
                std::thread::sleep(Duration::from_millis(40));
            }
        })
    };
    let output = child.wait_with_output().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    injector.join().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let warnings = other_command_warnings(&other);
    assert!(
        !warnings.is_empty(),
        "no write flagged: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    for warning in &warnings {
        assert!(warning.contains("DEBUG SLEEP 0.03"), "{warning}");
    }
    // One line per write, however many of its stalls were another client's.
    let writes: std::collections::BTreeSet<&str> = warnings
        .iter()
        .map(|w| w.split(':').next().unwrap())
        .collect();
    assert_eq!(writes.len(), warnings.len(), "{warnings:?}");
    // And the screen says it too.
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stderr.contains("another client's command") || stdout.contains("another client's command"),
        "{stdout}\n{stderr}"
    );
}

/// A `--url` server whose owner logs every command (`slowlog-log-slower-than 0`): the slow log
/// is read back only after a slow command, and the run says so (the hostile trial's run named none and
/// said nothing). Not said where the owner's threshold leaves the slow log readable.
#[test]
fn a_server_that_logs_every_command_is_said_to_name_no_stall_from_its_slow_log() {
    let said = "the server logs every command (slowlog-log-slower-than 0)";
    for (threshold, says) in [("0", true), ("10000", false)] {
        let server = TestServer::start(&[&format!("slowlog-log-slower-than {threshold}")]);
        let output = common::probe_cmd()
            .args(["--url", &server.url(), "--duration", "1s"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        assert_eq!(
            stderr.contains(said),
            says,
            "threshold {threshold}: {stderr}"
        );
    }
}

/// A user whose ACL lacks `CLIENT`: the run's connections go unnamed and each refusal lands in
/// the server's ACL LOG; the run says both (the hostile trial found the entries, unsaid). A user
/// with `CLIENT` hears nothing of it.
#[test]
fn a_user_refused_client_setname_is_told_what_that_costs() {
    let server = TestServer::start(&[]);
    redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "limited",
            "on",
            ">limited-pw",
            "~holprobe:*",
            "+@all",
            "-client",
        ])
        .exec(&mut server.conn())
        .unwrap();
    let said = "the server refuses this user CLIENT SETNAME (NOPERM";
    let port = server.url().rsplit(':').next().unwrap().to_string();
    for (url, says) in [
        (format!("redis://limited:limited-pw@127.0.0.1:{port}"), true),
        (server.url(), false),
    ] {
        let output = common::probe_cmd()
            .args(["--url", &url, "--writer-sizes", "1M"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        assert_eq!(stderr.contains(said), says, "{url}: {stderr}");
        assert!(!stderr.contains("limited-pw"), "{stderr}");
    }
}
