use super::label::LABEL_CHARS;
use super::*;

/// Second 1_700_000_000 on the wall clock, µs.
const T0_US: i64 = 1_700_000_000_000_000;

fn span(start_ms: i64, end_ms: i64) -> WallSpan {
    WallSpan {
        start_unix_us: T0_US + start_ms * 1_000,
        end_unix_us: T0_US + end_ms * 1_000,
    }
}

fn entry(id: i64, logged_s: i64, duration_us: i64, args: &[&str]) -> ServerCommandEntry {
    ServerCommandEntry {
        id,
        logged_unix_s: 1_700_000_000 + logged_s,
        duration_us,
        args: args.iter().map(|a| a.as_bytes().to_vec()).collect(),
        client_addr: Some(format!("10.0.0.5:{}", 51_000 + id)),
        client_name: None,
    }
}

fn event(name: &str, at_s: i64, latest_ms: i64) -> LatencyEvent {
    LatencyEvent {
        name: name.into(),
        at_unix_s: 1_700_000_000 + at_s,
        latest_ms,
        max_ms: latest_ms,
    }
}

#[test]
fn the_command_that_ran_during_the_stall_is_named_with_its_client() {
    let mut sleep = entry(7, 0, 50_400, &["debug", "SLEEP", "0.05"]);
    sleep.client_name = Some("app-worker".into());
    let entries = [entry(6, 0, 1_200, &["GET", "a"]), sleep];
    // The stall: 300..352 ms into the second in which the DEBUG SLEEP was logged.
    let culprit = name_stall(span(300, 352), &entries, &[event("command", 0, 50)]);
    assert_eq!(
        culprit,
        Culprit {
            server_command: Some("DEBUG SLEEP 0.05".into()),
            server_client: Some("10.0.0.5:51007 app-worker".into()),
            server_event: Some("command 50ms".into()),
        }
    );
}

#[test]
fn a_stall_named_by_another_client_s_command_is_told_from_the_run_s() {
    let prefix = b"holprobe:ab12:";
    // The run's DEL of its key, its CONFIG SET on a connection the tool named, another client's
    // sleep and an EVAL whose key argument only looks like the run's.
    let del = entry(1, 0, 50_000, &["DEL", "holprobe:ab12:w:3"]);
    let mut config = entry(2, 0, 50_000, &["CONFIG", "SET", "maxmemory", "100"]);
    config.client_name = Some("holprobe-writer".into());
    let sleep = entry(3, 0, 50_000, &["DEBUG", "SLEEP", "0.05"]);
    let eval = entry(4, 0, 50_000, &["EVAL", "return 1", "1", "holprobe:other:k"]);
    for (ours, e) in [
        (true, &del),
        (true, &config),
        (false, &sleep),
        (false, &eval),
    ] {
        assert_eq!(is_the_runs(e, prefix), ours, "{e:?}");
        let found = foreign_entry(span(300, 352), std::slice::from_ref(e), prefix);
        assert_eq!(found.is_none(), ours, "{e:?}");
    }
    // A DEL named after its key, though another client sent it: a key of the run's is the run's.
    assert!(is_the_runs(
        &entry(5, 0, 1, &["del", "holprobe:ab12:x"]),
        prefix
    ));
    // The command is only the first argument: a command named like the prefix is not a key.
    assert!(!is_the_runs(&entry(6, 0, 1, &["holprobe:ab12:x"]), prefix));
    // A second run on the same server: its writer has the same name, its keys another prefix.
    let run = b"holprobe:0000ab12:";
    let mut theirs = entry(7, 0, 50_000, &["DEL", "holprobe:feedf00d:w:1"]);
    theirs.client_name = Some("holprobe-writer".into());
    assert!(!is_the_runs(&theirs, run));
    let mut ours = entry(8, 0, 50_000, &["DEL", "holprobe:0000ab12:w:1"]);
    ours.client_name = Some("holprobe-writer".into());
    assert!(is_the_runs(&ours, run));
    // That run's commands that name no key (its CONFIG SET of an eviction, its INFO): told
    // apart by the run id in its connection's name; this run's own, and a name without an id
    // (the server-log poller's), are the run's.
    let config = |name: &str| {
        let mut e = entry(9, 0, 50_000, &["CONFIG", "SET", "maxmemory", "100"]);
        e.client_name = Some(name.into());
        e
    };
    assert_eq!(
        run_client_name("holprobe-writer", "holprobe:0000ab12:"),
        "holprobe-writer-0000ab12"
    );
    assert_eq!(
        run_client_name("holprobe-writer", "holprobe:0000ab12:{hp}:"),
        "holprobe-writer-0000ab12"
    );
    assert_eq!(run_client_name("holprobe-keys", "x:"), "holprobe-keys");
    assert!(is_the_runs(&config("holprobe-writer-0000ab12"), run));
    assert!(!is_the_runs(&config("holprobe-writer-feedf00d"), run));
    assert!(!is_the_runs(&config("holprobe-calibrate-feedf00d"), run));
    // The server-log poller's: a run names it with its id (its SLOWLOG pages and CONFIG
    // RESETSTAT); a bare name (an older version's) is taken for the run's, as before.
    assert!(is_the_runs(&config("holprobe-culprit-0000ab12"), run));
    assert!(!is_the_runs(&config("holprobe-culprit-feedf00d"), run));
    assert!(is_the_runs(&config("holprobe-culprit"), run));
    assert!(!is_the_runs(&config("myapp-writer-0000ab12"), run));
}

#[test]
fn a_command_logged_just_after_a_second_boundary_still_matches() {
    // Ran 980..1030 ms: logged in second 1, the stall starts in second 0.
    let entries = [entry(1, 1, 50_000, &["DEL", "big:key"])];
    let culprit = name_stall(span(980, 1_031), &entries, &[]);
    assert_eq!(culprit.server_command.as_deref(), Some("DEL big:key"));
    assert_eq!(culprit.server_event, None);
}

#[test]
fn no_candidate_names_nothing() {
    let culprit = name_stall(span(100, 150), &[], &[]);
    assert_eq!(culprit, Culprit::default());
    // Overlapping, but far too short to explain 50 ms of silence (a big SET's logged µs).
    let entries = [entry(1, 0, 14, &["SET", "holprobe:k", "v"])];
    assert_eq!(
        name_stall(span(100, 150), &entries, &[]),
        Culprit::default()
    );
    // Overlapping, but a 400 ms command would have made a 400 ms stall, not 50 ms.
    let entries = [entry(1, 0, 400_000, &["KEYS", "*"])];
    let culprit = name_stall(span(100, 150), &entries, &[event("command", 0, 400)]);
    assert_eq!(culprit, Culprit::default());
}

#[test]
fn of_two_candidates_in_one_second_the_duration_nearest_the_stall_wins() {
    let entries = [
        entry(1, 0, 30_000, &["HGETALL", "h"]),
        entry(2, 0, 51_000, &["DEBUG", "SLEEP", "0.05"]),
        entry(3, 0, 62_000, &["SMEMBERS", "s"]),
    ];
    let culprit = name_stall(span(500, 553), &entries, &[]);
    assert_eq!(culprit.server_command.as_deref(), Some("DEBUG SLEEP 0.05"));
    assert_eq!(culprit.server_client.as_deref(), Some("10.0.0.5:51002"));
    // Two with the same duration cannot be told apart: the tie goes to the earlier id.
    let entries = [
        entry(9, 0, 50_000, &["DEBUG", "SLEEP", "0.05"]),
        entry(8, 0, 50_000, &["DEBUG", "SLEEP", "0.050"]),
    ];
    let culprit = name_stall(span(500, 551), &entries, &[]);
    assert_eq!(culprit.server_command.as_deref(), Some("DEBUG SLEEP 0.050"));
}

#[test]
fn a_longer_neighbour_in_the_same_second_is_not_named() {
    // A 50 ms sleep and, in the same second, a 29 ms stall the log has no entry for (the
    // monitor kept only the second's worst figure): neither the sleep nor its event.
    let entries = [entry(1, 0, 50_100, &["DEBUG", "SLEEP", "0.05"])];
    let events = [event("command", 0, 50)];
    assert_eq!(
        name_stall(span(600, 629), &entries, &events),
        Culprit::default()
    );
    // Within a quarter and 2 ms of the stall it is still the cause.
    let culprit = name_stall(span(600, 641), &entries, &events);
    assert_eq!(culprit.server_command.as_deref(), Some("DEBUG SLEEP 0.05"));
    assert_eq!(culprit.server_event.as_deref(), Some("command 50ms"));
}

#[test]
fn an_entry_far_outside_the_stall_is_not_a_candidate() {
    let entries = [
        entry(1, -5, 50_000, &["DEBUG", "SLEEP", "0.05"]),
        entry(2, 3, 50_000, &["DEBUG", "SLEEP", "0.05"]),
    ];
    let events = [event("command", -5, 50), event("command", 3, 50)];
    assert_eq!(
        name_stall(span(400, 451), &entries, &events),
        Culprit::default()
    );
    // A second before the stall: over before it began (it ended within second -1).
    let entries = [entry(1, -1, 50_000, &["DEBUG", "SLEEP", "0.05"])];
    assert_eq!(name_stall(span(10, 61), &entries, &[]), Culprit::default());
    // A long command logged in the next second may have begun inside this one.
    let entries = [entry(1, 1, 900_000, &["DEBUG", "SLEEP", "0.9"])];
    let culprit = name_stall(span(200, 1_101), &entries, &[]);
    assert_eq!(culprit.server_command.as_deref(), Some("DEBUG SLEEP 0.9"));
}

#[test]
fn events_in_the_stall_seconds_are_listed_largest_first() {
    let events = [
        event("expire-cycle", 0, 12),
        event("command", 0, 51),
        event("fork", 2, 30),          // another second
        event("fast-command", 0, 900), // longer than the stall could hide
    ];
    let culprit = name_stall(span(100, 160), &[], &events);
    assert_eq!(
        culprit.server_event.as_deref(),
        Some("command 51ms, expire-cycle 12ms")
    );
    assert_eq!(culprit.server_command, None);
}

#[test]
fn long_and_binary_arguments_are_cut_and_escaped() {
    // What SLOWLOG logs for a 64 MiB SET: 128 bytes of the value and the rest counted.
    let mut value = vec![0u8, 0xff, b'\n'];
    value.extend_from_slice(&[b'x'; 125]);
    value.extend_from_slice(b"... (67108736 more bytes)");
    let args = vec![b"set".to_vec(), b"holprobe:ab:w1:64M:1".to_vec(), value];
    let label = command_label(&args);
    assert_eq!(label, "SET holprobe:ab:w1:64M:1 \\x00\\xff\\nxx...(64M)");
    // A long script: quoted, cut, and the label stays short.
    let script = format!("local t = redis.call('TIME') {}", "x".repeat(5_000));
    let label = command_label(&[b"EVAL".to_vec(), script.into_bytes(), b"0".to_vec()]);
    assert_eq!(label, "EVAL \"local t = redis.cal...\" 0");
    // Many arguments: the first few, then a mark.
    let args: Vec<Vec<u8>> = std::iter::once(b"mset".to_vec())
        .chain((0..40).map(|i| format!("key:{i}").into_bytes()))
        .collect();
    let label = command_label(&args);
    assert!(label.starts_with("MSET key:0 key:1 "), "{label}");
    assert!(label.ends_with(" ..."), "{label}");
    assert!(label.chars().count() <= LABEL_CHARS + 4, "{label}");
    // A huge argument never gets through whole, and nothing unprintable does.
    let mut junk = vec![0x80u8; 10_000];
    junk.extend_from_slice("ключ \u{7}".as_bytes());
    for label in [
        command_label(&[b"GET".to_vec(), junk.clone()]),
        command_label(&[junk.clone()]),
    ] {
        assert!(label.chars().count() <= LABEL_CHARS + 8, "{label}");
        assert!(!label.chars().any(char::is_control), "{label:?}");
    }
    assert_eq!(printable("ключ \u{7}\"".as_bytes()), "ключ \\x07\\\"");
    assert_eq!(command_label(&[b"SET".to_vec(), Vec::new()]), "SET \"\"");
    // Words that only look like the server's mark (not after 128 bytes) stay as they are.
    let arg = b"x... (5 more bytes)".to_vec();
    assert_eq!(
        command_label(&[b"ECHO".to_vec(), arg]),
        "ECHO \"x... (5 more bytes)\""
    );
    assert_eq!(command_label(&[]), "");
}

#[test]
fn clients_are_labelled_by_what_the_server_said() {
    let mut e = entry(1, 0, 1, &["PING"]);
    assert_eq!(client_label(&e).as_deref(), Some("10.0.0.5:51001"));
    e.client_name = Some("app-worker".into());
    assert_eq!(
        client_label(&e).as_deref(),
        Some("10.0.0.5:51001 app-worker")
    );
    e.client_addr = None;
    assert_eq!(client_label(&e).as_deref(), Some("app-worker"));
    e.client_name = None;
    assert_eq!(client_label(&e), None);
}
#[test]
fn latency_rows_count_when_new_or_changed() {
    let before = [event("command", 0, 51)];
    let after = [
        event("command", 0, 51),
        event("expire-cycle", 1, 12),
        event("fork", 0, 3),
    ];
    assert_eq!(latency_changes(&before, &after).len(), 2);
    let after = [event("command", 2, 51)];
    assert_eq!(
        latency_changes(&before, &after),
        vec![event("command", 2, 51)]
    );
    assert!(latency_changes(&before, &before).is_empty());
}

#[test]
fn passwords_in_logged_commands_are_never_shown() {
    let args =
        |words: &[&str]| -> Vec<Vec<u8>> { words.iter().map(|w| w.as_bytes().to_vec()).collect() };
    for (words, label) in [
        (&["auth", "s3cret"][..], "AUTH (arguments hidden)"),
        (
            &["HELLO", "3", "AUTH", "u", "s3cret"],
            "HELLO (arguments hidden)",
        ),
        (
            &["MIGRATE", "h", "1", "k", "0", "9", "AUTH", "s3cret"],
            "MIGRATE (arguments hidden)",
        ),
        (
            &["ACL", "SETUSER", "u", ">s3cret"],
            "ACL SETUSER (arguments hidden)",
        ),
        (
            &["CONFIG", "SET", "requirepass", "s3cret"],
            "CONFIG SET (arguments hidden)",
        ),
        (
            &["CONFIG", "SET", "masterauth", "s3cret"],
            "CONFIG SET (arguments hidden)",
        ),
    ] {
        let shown = command_label(&args(words));
        assert_eq!(shown, label);
        assert!(!shown.contains("s3cret"));
    }
    assert_eq!(
        command_label(&args(&["CONFIG", "SET", "maxmemory", "1gb"])),
        "CONFIG SET maxmemory 1gb"
    );
}

fn removed(key: &str, at_ms: i64) -> RemovedKey {
    RemovedKey {
        event: "expired".into(),
        key: key.as_bytes().to_vec(),
        at_unix_us: T0_US + at_ms * 1_000,
    }
}

#[test]
fn a_key_heard_by_the_stall_s_end_names_it() {
    let stall = span(1_000, 1_451);
    // Heard as the silence ended (the free ended it), a little after, and inside it.
    assert_eq!(
        key_label(stall, &[removed("big:hash", 1_452)]).as_deref(),
        Some("expired big:hash")
    );
    assert_eq!(
        key_label(stall, &[removed("a", 1_100), removed("big:hash", 1_451)]).as_deref(),
        Some("expired big:hash, a")
    );
    // Before the stall began, or well after it ended: another story.
    assert_eq!(key_label(stall, &[removed("early", 999)]), None);
    assert_eq!(key_label(stall, &[removed("late", 1_460)]), None);
    let many: Vec<RemovedKey> = (0..5)
        .map(|i| removed(&format!("k{i}"), 1_200 + i))
        .collect();
    assert_eq!(
        key_label(stall, &many).as_deref(),
        Some("expired k4, k3 (+3 more)")
    );
    let mut evicted = removed("e", 1_300);
    evicted.event = "evicted".into();
    assert_eq!(
        key_label(stall, &[evicted, removed("x", 1_200)]).as_deref(),
        Some("evicted e, expired x")
    );
    // Keys are printable, whatever bytes they hold.
    let binary = RemovedKey {
        key: b"k\x00\xff".to_vec(),
        ..removed("", 1_400)
    };
    assert_eq!(
        key_label(stall, &[binary]).as_deref(),
        Some("expired k\\x00\\xff")
    );
}

#[test]
fn a_latency_event_reads_as_what_the_server_was_doing() {
    assert_eq!(
        cause_of("latency expire-cycle 451ms, expire-del 451ms").as_deref(),
        Some("active expiry 451ms (expire-cycle, expire-del)")
    );
    assert_eq!(
        cause_of("latency eviction-del 30ms, command 2ms; event loop max 31.0ms").as_deref(),
        Some("eviction 30ms (eviction-del)")
    );
    // Redis 8.2's name for the same event.
    assert_eq!(
        cause_of("latency evict-del 120ms, eviction-cycle 120ms").as_deref(),
        Some("eviction 120ms (evict-del, eviction-cycle)")
    );
    assert_eq!(
        cause_of("latency fork 12ms").as_deref(),
        Some("fork (a snapshot or AOF rewrite) 12ms (fork)")
    );
    assert_eq!(
        cause_of("latency aof-fsync-always 8ms").as_deref(),
        Some("AOF write or fsync 8ms (aof-fsync-always)")
    );
    // A command is SLOWLOG's to name; the event loop alone says no cause.
    assert_eq!(cause_of("latency command 51ms"), None);
    assert_eq!(cause_of("event loop max 50.3ms"), None);
    assert_eq!(
        cause_of("latency some-new-event 5ms").as_deref(),
        Some("some-new-event 5ms (some-new-event)")
    );
}
