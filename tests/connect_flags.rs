//! redis-cli style connection flags beside `--url`: `--host`, `--port`, `--password`, `--user`,
//! on every subcommand that takes `--url`, against real servers; the password is never printed
//! or stored.

mod common;

use common::{Exited, TestServer, exits_with, probe_cmd, run_to_end};

const PASSWORD: &str = "flag-sekrit-pw";

/// Nothing the command printed or wrote holds the password.
fn assert_no_password(output: &Exited, dir: Option<&std::path::Path>) {
    assert!(!output.stdout.contains(PASSWORD));
    assert!(!output.stderr.contains(PASSWORD));
    if let Some(dir) = dir {
        for entry in std::fs::read_dir(dir).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
            assert!(!text.contains(PASSWORD), "in {}", dir.display());
        }
    }
}

#[test]
fn host_port_and_password_reach_the_server_on_every_subcommand() {
    let server = TestServer::start(&[&format!("requirepass {PASSWORD}")]);
    let port = server.port().to_string();
    let flags = [
        "--host",
        "127.0.0.1",
        "--port",
        &port,
        "--password",
        PASSWORD,
    ];

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let output = exits_with(
        probe_cmd()
            .args(flags)
            .args(["--writer-sizes", "1M", "--gap", "50ms", "--out"])
            .arg(&out),
        0,
    );
    assert!(output.stderr.contains(&format!("127.0.0.1:{port}")));
    assert_no_password(&output, Some(&out));

    for args in [
        &[
            "calibrate",
            "--stalls",
            "5",
            "--times",
            "1",
            "--method",
            "lua-time",
        ][..],
        &["populate", "--keys", "200", "--value-size", "64"],
        &["load", "--clients", "2", "--duration", "1s"],
        &["clean"],
    ] {
        let output = run_to_end(probe_cmd().args(args).args(flags));
        let stderr = &output.stderr;
        // calibrate judges its accuracy, which a busy shared host can fail (exit 1); it got
        // through to the server all the same.
        let ok = if args[0] == "calibrate" {
            &[0, 1][..]
        } else {
            &[0][..]
        };
        assert!(
            ok.contains(&output.code.unwrap_or(-1)) && !stderr.contains("NOAUTH"),
            "{args:?}: {stderr}"
        );
        assert_no_password(&output, None);
    }

    // A wrong password is refused by the server, and not printed either.
    let output = exits_with(
        probe_cmd().args([
            "--port",
            &port,
            "--password",
            "not-the-flag-pw",
            "--duration",
            "1s",
        ]),
        1,
    );
    assert!(!output.stderr.contains("not-the-flag-pw"));
}

#[test]
fn user_names_an_acl_user() {
    let server = TestServer::start(&[]);
    redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "flaguser",
            "on",
            &format!(">{PASSWORD}"),
            "~*",
            "+@all",
        ])
        .query::<()>(&mut server.conn())
        .unwrap();
    let port = server.port().to_string();
    let as_flaguser = [
        "--port",
        &port,
        "--user",
        "flaguser",
        "--password",
        PASSWORD,
    ];
    let stdout = run_to_end(
        probe_cmd()
            .args(as_flaguser)
            .args(["--dry-run", "--duration", "1s"]),
    )
    .stdout;
    assert!(
        stdout.contains(&format!(
            "target: redis://flaguser:***@127.0.0.1:{port} (password: given, not shown)"
        )),
        "{stdout}"
    );
    let output = exits_with(probe_cmd().args(as_flaguser).args(["--duration", "1s"]), 0);
    assert_no_password(&output, None);
    // The same user with another password: refused.
    exits_with(
        probe_cmd()
            .args(["--port", &port, "--user", "flaguser", "--password", "nope"])
            .args(["--duration", "1s"]),
        1,
    );
}
