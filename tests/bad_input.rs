//! Every command's bad input: one line naming the flag and the value, exit 2, no panic, and
//! nothing started or sent (a server binary that does not exist proves no server was started;
//! an unreachable --url proves nothing was connected to).

mod common;

use common::{NO_SERVER, probe_cmd};

/// (arguments, text the one-line error must contain)
const CASES: &[(&[&str], &str)] = &[
    (&["--writer-sizes", "64X"], "'64X' for --writer-sizes"),
    (&["--writer-sizes", "-1M"], "'-1M' for --writer-sizes"),
    (&["--writer-sizes", "0"], "'0' for --writer-sizes"),
    (&["--writer-sizes", "1.5.2M"], "'1.5.2M' for --writer-sizes"),
    (&["--writer-sizes", ""], "for --writer-sizes"),
    (
        &["--writer-sizes", "64m"],
        "'64m' for --writer-sizes: in redis.conf 64m means 64,000,000 bytes; write 64M or 64MiB for 64 MiB, or 64000000",
    ),
    (&["load", "--value-size", "1k..4k"], "'1k' for --value-size"),
    (
        &["--writer-sizes", "1M", "--probe-rate", "0"],
        "'0' for --probe-rate",
    ),
    (
        &["--writer-sizes", "1M", "--probe-rate", "-5"],
        "'-5' for --probe-rate",
    ),
    (
        &["--writer-sizes", "1M", "--probe-rate", "1e9"],
        "sends at most",
    ),
    (
        &["--writer-sizes", "1M", "--probe-threads", "0"],
        "--probe-threads",
    ),
    (
        &["--writer-sizes", "1M", "--probe-threads", "x"],
        "--probe-threads",
    ),
    (
        &["--writer-sizes", "1M", "--gap", "soon"],
        "'soon' for --gap",
    ),
    (
        &["--writer-sizes", "1M", "--repeat", "0"],
        "'0' for --repeat",
    ),
    (&["--duration", "-3s"], "--duration"),
    (
        &["--duration", "1s", "--stall-threshold", "1us"],
        "--stall-threshold",
    ),
    (&["--duration", "1s", "--timeout", "0s"], "--timeout"),
    (
        &["--duration", "1s", "--connect-timeout", "x"],
        "--connect-timeout",
    ),
    (&["--duration", "1s", "--url", "http://h:1"], "for --url"),
    (&["--duration", "1s", "--url", "redis://h:0"], "for --url"),
    (
        &["--duration", "1s", "--url", "redis://h:port"],
        "for --url",
    ),
    (&["--bogus"], "unexpected argument '--bogus'"),
    (&["--interval", "1ms"], "'1ms' for --interval"),
    (&["--report-every", "soon"], "'soon' for --report-every"),
    // An eviction on a server the tool did not start: refused by the dry run too.
    (
        &[
            "--url",
            "redis://127.0.0.1:1",
            "--type",
            "hash",
            "--elements",
            "10",
            "--ops",
            "build,evict",
            "--dry-run",
        ],
        "evict lowers maxmemory",
    ),
    (
        &["--duration", "1s", "--report-every", "1500ms"],
        "'1500ms' for --report-every: a line gathers whole --interval rows (1s)",
    ),
    (&["--show-stalls", "some"], "'some' for --show-stalls"),
    (&["calibrate", "--stalls", "abc"], "'abc' for --stalls"),
    (&["calibrate", "--stalls", "0"], "'0' for --stalls"),
    (&["calibrate", "--times", "0"], "'0' for --times"),
    (&["calibrate", "--probe-rate", "0"], "--probe-rate"),
    (&["populate", "--keys", "0"], "'0' for --keys"),
    (
        &["populate", "--value-size", "4096..1024"],
        "for --value-size",
    ),
    (&["populate", "--value-size", "2Q"], "for --value-size"),
    (&["load", "--clients", "0"], "'0' for --clients"),
    (&["load", "--rate", "-1"], "'-1' for --rate"),
    (&["load", "--ratio", "1:x"], "'1:x' for --ratio"),
    (&["load", "--pipeline", "0"], "'0' for --pipeline"),
    (&["load", "--duration", "0s"], "'0s' for --duration"),
    (
        &["load", "--writer-sizes", "64X"],
        "'64X' for --writer-sizes",
    ),
    (&["clean", "--batch", "0"], "'0' for --batch"),
    (&["clean", "--url", "redis://h:99999"], "for --url"),
    (&["load", "--bogus"], "unexpected argument '--bogus'"),
    (
        &["--duration", "1s", "--url", "redis://h:1", "--host", "h"],
        "--url and --host both name the server",
    ),
    (
        &["load", "--url", "redis://h:1", "--port", "2"],
        "--url and --port both name the server",
    ),
    (
        &["clean", "--url", "redis://h:1", "--password", "x"],
        "--url and --password both name the server",
    ),
    (&["populate", "--port", "0"], "'0' for --port"),
    (
        &["--duration", "1s", "--server-arg", "daemonize yes"],
        "'daemonize yes' for --server-arg: daemonize is set by the tool",
    ),
    (
        &["calibrate", "--server-arg", "DIR /tmp"],
        "'DIR /tmp' for --server-arg: dir is set by the tool",
    ),
    (
        &["load", "--server-arg", "include /etc/redis/redis.conf"],
        "for --server-arg: include is set by the tool",
    ),
    (
        &["--writer-sizes", "1M", "--server-arg", "pidfile /tmp/x.pid"],
        "for --server-arg: pidfile",
    ),
    (
        &[
            "--duration",
            "1s",
            "--server-arg",
            "cluster-config-file /tmp/n.conf",
        ],
        "for --server-arg: cluster-config-file",
    ),
    (
        &["calibrate", "--password", "x"],
        "--password needs --host or --port",
    ),
];

#[test]
fn every_bad_input_is_one_line_exit_2_and_no_panic() {
    for (args, needle) in CASES {
        assert_refused(args, needle);
    }
}

/// `--dry-run` of the main job and of `load`: the plan, exit 0, no password, and nothing sent
/// (nothing listens on port 1, so a connection would fail the command); against `--url` no
/// word of a server the tool would start.
#[test]
fn dry_runs_print_the_plan_and_connect_to_nothing() {
    let url = "redis://:s3cret@127.0.0.1:1";
    let cases: [(&[&str], &str); 3] = [
        (
            &["--dry-run", "--url", url, "--writer-sizes", "1M"],
            "SET holprobe:<run-id>:",
        ),
        (&["--dry-run", "--url", url, "--duration", "1s"], "observe"),
        (
            &[
                "load",
                "--dry-run",
                "--url",
                url,
                "--ratio",
                "1:4",
                "--writer-sizes",
                "1M",
            ],
            "requests SET:GET 1:4",
        ),
    ];
    for (args, needle) in cases {
        let output = probe_cmd().args(args).output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(
            stdout.starts_with("dry run: nothing is started, connected to or sent\ntarget: redis://127.0.0.1:1 (password: given, not shown)"),
            "{args:?}: {stdout}"
        );
        assert!(stdout.contains(needle), "{args:?}: {stdout}");
        // What the run would change or write on someone else's server is said (the hostile
        // trial: notify-keyspace-events and the marker keys were not).
        if args[0] != "load" {
            for change in [
                "notify-keyspace-events +Exe",
                "holprobe:<run-id>:lease",
                "holprobe:markers",
            ] {
                assert!(stdout.contains(change), "{args:?}: {change}: {stdout}");
            }
        }
        for word in ["s3cret", "embedded", "started server"] {
            assert!(
                !stdout.contains(word) && !stderr.contains(word),
                "{args:?}: {word}: {stdout}{stderr}"
            );
        }
    }
}

/// `--format json --dry-run`: stdout is one JSON document with the plan's lines (it was the
/// text plan, which a CI piping to jq cannot read; the hostile trial).
#[test]
fn a_dry_run_in_json_is_one_json_document() {
    let url = "redis://:s3cret@127.0.0.1:1";
    for (args, command) in [
        (
            &[
                "--dry-run",
                "--format",
                "json",
                "--url",
                url,
                "--writer-sizes",
                "1M",
            ][..],
            "probe",
        ),
        (
            &["load", "--dry-run", "--format", "json", "--url", url],
            "load",
        ),
    ] {
        let output = probe_cmd().args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{args:?}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let doc: serde_json::Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|err| panic!("{args:?}: not JSON ({err}): {stdout}"));
        assert_eq!(doc["dry_run"], true);
        assert_eq!(doc["command"], command);
        let plan = doc["plan"].as_array().expect("the plan's lines");
        assert_eq!(
            plan[0], "dry run: nothing is started, connected to or sent",
            "{doc}"
        );
        assert!(!stdout.contains("s3cret"), "{stdout}");
    }
}

/// Every subcommand's `--help`: no "seed" (the old name of what the tool grew from) anywhere,
/// the random state's flag included (`--random-state`; its old name `--seed` is a hidden
/// alias), and populate/clean do not speak of measuring.
#[test]
fn help_of_every_subcommand_says_no_seed() {
    for sub in [
        &[][..],
        &["calibrate"],
        &["populate"],
        &["load"],
        &["clean"],
        &["keys"],
        &["compare"],
    ] {
        let output = probe_cmd().args(sub).arg("--help").output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{sub:?}");
        let help = String::from_utf8_lossy(&output.stdout);
        for line in help.lines() {
            assert!(!line.to_lowercase().contains("seed"), "{sub:?}: {line}");
        }
        if matches!(sub.first(), Some(&"populate" | &"clean")) {
            assert!(
                !help.contains("Measure an existing server"),
                "{sub:?}: {help}"
            );
            assert!(!help.contains("--server-bin"), "{sub:?}: {help}");
        }
    }
    // A bad value under either name is said to be the flag's by its name.
    for sub in [&[][..], &["load"], &["populate"]] {
        for flag in ["--random-state", "--seed"] {
            let output = probe_cmd()
                .args(sub)
                .args([flag, "x"])
                .args(NO_SERVER)
                .output()
                .unwrap();
            assert_eq!(output.status.code(), Some(2), "{sub:?} {flag}");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                stderr.contains("--random-state"),
                "{sub:?} {flag}: {stderr}"
            );
            assert!(
                !stderr.to_lowercase().contains("seed"),
                "{sub:?} {flag}: {stderr}"
            );
        }
    }
}

/// A short run on the embedded server says "seed" nowhere: not on the screen, not in run.json
/// (which records the random state as `random_state`, here given by the old hidden `--seed`).
#[test]
fn a_short_run_writes_no_seed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let output = probe_cmd()
        .args([
            "--writer-sizes",
            "1K",
            "--gap",
            "100ms",
            "--probe-rate",
            "500",
        ])
        .args(["--seed", "7", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let screen = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{screen}");
    assert!(!screen.to_lowercase().contains("seed"), "{screen}");
    let run_json = std::fs::read_to_string(out.join("run.json")).unwrap();
    assert!(!run_json.to_lowercase().contains("seed"), "{run_json}");
    let run: serde_json::Value = serde_json::from_str(&run_json).unwrap();
    assert_eq!(run["options"]["random_state"], 7, "{run_json}");
    assert_eq!(run["options"]["writer"]["random_state"], 7, "{run_json}");
}

/// One line naming the flag, exit 2, no panic, nothing on stdout. Unless the arguments name a
/// server (or are not the tool's at all), the server binary does not exist: nothing started.
fn assert_refused(args: &[&str], needle: &str) -> String {
    let mut cmd = probe_cmd();
    cmd.args(args);
    if !args.contains(&"--url") && !args.contains(&"--bogus") {
        cmd.args(NO_SERVER);
    }
    let output = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(
        stderr.contains(needle),
        "{args:?}: expected '{needle}' in: {stderr}"
    );
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "{args:?}: not one line: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(
        output.stdout.is_empty(),
        "{args:?}: printed {:?}",
        output.stdout
    );
    stderr
}

/// Rates near zero once panicked (calibrate: a Duration too big) or wrapped into a schedule
/// that sent as fast as it could (hundreds of thousands of PINGs a second); a stall length near
/// infinity likewise. Every rate flag has one floor.
#[test]
fn rates_near_zero_and_lengths_near_infinity_are_refused() {
    for (args, needle) in [
        (
            &["calibrate", "--probe-rate", "1e-20"][..],
            "'1e-20' for --probe-rate",
        ),
        (
            &["--duration", "1s", "--probe-rate", "1e-300"],
            "'1e-300' for --probe-rate",
        ),
        (
            &["--duration", "1s", "--probe-rate", "0.5"],
            "must be at least 1",
        ),
        (&["load", "--rate", "1e-300"], "'1e-300' for --rate"),
        (&["load", "--rate", "0.01"], "must be at least 1"),
        (&["calibrate", "--stalls", "1e300"], "'1e300' for --stalls"),
        // Durations of centuries once overflowed the clock: --timeout in the cleanup (a panic,
        // run.json left `running`), --gap in the writer.
        (
            &["--duration", "1s", "--timeout", "300000000000y"],
            "'300000000000y' for --timeout: must be at most a year",
        ),
        (
            &["--writer-sizes", "1K", "--gap", "18446744073709551615s"],
            "'18446744073709551615s' for --gap: must be at most a year",
        ),
        (
            &["--duration", "400d"],
            "'400d' for --duration: must be at most a year",
        ),
        // M is humantime's month: `--duration 1M` probed for 30 days.
        (&["--duration", "1M"], "'1M' for --duration: M is a month"),
    ] {
        assert_refused(args, needle);
    }
}

/// Flags of the main job given before a subcommand: clap's "cannot be used with:" named none of
/// them.
#[test]
fn flags_before_a_subcommand_are_named() {
    let stderr = assert_refused(
        &[
            "--port",
            "7732",
            "--user",
            "u",
            "--password",
            "p",
            "calibrate",
        ],
        "--port, --user, --password given before the subcommand 'calibrate'",
    );
    assert!(!stderr.contains("cannot be used with:"), "{stderr}");
    assert!(!stderr.contains(" p "), "{stderr}");
}

/// A URL query (`?password=x`) was refused as "the port must be a number"; a password holding
/// `/` was shown whole, one holding `@` in part. The message names the query, and shows no
/// part of a password.
#[test]
fn url_queries_and_reserved_characters_are_named_without_the_password() {
    let stderr = assert_refused(
        &[
            "--duration",
            "1s",
            "--url",
            "redis://127.0.0.1:7731?password=Xyzzy1",
        ],
        "a query (?password=..., ?db=...) is not read",
    );
    assert!(!stderr.contains("Xyzzy1"), "{stderr}");
    for (url, secret) in [
        ("redis://:TopSecret/xyz@127.0.0.1:7731", "TopSecret"),
        ("redis://user:p@ss:w/rd@127.0.0.1:7731", "ss:w"),
        ("redis://user:p@ss:w/rd@127.0.0.1:7731", "rd@"),
    ] {
        let stderr = assert_refused(&["--duration", "1s", "--url", url], "percent-encode it");
        assert!(!stderr.contains(secret), "{secret}: {stderr}");
    }
}

/// An IPv6 target was printed `redis://::1:7738`, which --url refuses: it is printed
/// `redis://[::1]:7738`, and that reads back.
#[test]
fn ipv6_targets_are_printed_as_urls_that_read_back() {
    let output = probe_cmd()
        .args([
            "--dry-run",
            "--duration",
            "1s",
            "--url",
            "redis://[::1]:7738",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("target: redis://[::1]:7738 "), "{stdout}");
    let shown = stdout
        .lines()
        .find_map(|line| line.strip_prefix("target: "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    let again = probe_cmd()
        .args(["--dry-run", "--duration", "1s", "--url", &shown])
        .output()
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(0),
        "{shown}: {}",
        String::from_utf8_lossy(&again.stderr)
    );
}

/// A plan no host could hold (a million 1M fields: about 4.9 TiB on the server) was printed by
/// `--dry-run` without a word (hostile trial): the plan now says it is more than this host has,
/// and one that fits does not.
#[test]
fn a_dry_run_says_when_the_server_would_need_more_than_the_host_has() {
    let plan = |args: &[&str]| {
        let output = probe_cmd().arg("--dry-run").args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        String::from_utf8_lossy(&output.stdout).to_string()
    };
    let huge = plan(&["--type", "hash", "--elements", "1M", "--element-size", "1M"]);
    assert!(huge.contains("more than this host's memory"), "{huge}");
    let small = plan(&["--writer-sizes", "1M"]);
    assert!(!small.contains("more than this host's memory"), "{small}");
}

/// `--user` without a password sent no AUTH: the connection was the default user's while the
/// report named the user (the hostile trial).
#[test]
fn a_user_without_a_password_is_refused() {
    let mut cmd = probe_cmd();
    cmd.args([
        "keys",
        "--host",
        "127.0.0.1",
        "--port",
        "1",
        "--user",
        "bob",
    ])
    .env_remove("REDISCLI_AUTH");
    let output = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid value 'bob' for --user") && stderr.trim().lines().count() == 1,
        "{stderr}"
    );
}

/// A measuring command asked for JSON that fails before its report (nothing listens, a
/// password refused) prints the failed run's shape on stdout, so a script piping it to jq reads
/// one document (it printed nothing; both hostile trials of 2026-12-05). The password is not in
/// it.
#[test]
fn a_failure_before_the_report_is_one_json_document() {
    // A port nothing listens on: one just bound and let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://:s3cret@127.0.0.1:{port}");
    for args in [
        &["--url", url.as_str(), "--writer-sizes", "1M"][..],
        &["load", "--url", url.as_str(), "--duration", "1s"],
        &["keys", "--url", url.as_str()],
        &["calibrate", "--url", url.as_str()],
    ] {
        let output = probe_cmd()
            .args(args)
            .args(["--format", "json"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let doc: serde_json::Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|err| panic!("{args:?}: not JSON ({err}): {stdout}"));
        assert_eq!(doc["status"], "failed", "{doc}");
        assert!(
            doc["status_reason"]
                .as_str()
                .is_some_and(|r| r.contains("cannot connect")),
            "{doc}"
        );
        assert!(!stdout.contains("s3cret"), "{stdout}");
        // Without --format json, stdout stays empty.
        let text = probe_cmd().args(args).output().unwrap();
        assert!(text.stdout.is_empty(), "{args:?}");
    }
}

/// A database the server refuses (`redis://host:port/99`, past its `databases`) is said as the
/// flag's value in one line, before anything is measured: it was redis-rs's "refused to switch
/// database", not naming --url.
#[test]
fn a_database_the_server_refuses_names_the_url() {
    let server = common::TestServer::start(&[]);
    let url = format!("{}/99", server.url());
    for args in [
        &["--url", url.as_str(), "--writer-sizes", "1M"][..],
        &["keys", "--url", url.as_str()],
    ] {
        let output = probe_cmd().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("--url {url}: the server refused database 99"))
                && stderr.contains("out of range")
                && stderr.trim().lines().count() == 1,
            "{args:?}: {stderr}"
        );
    }
}
