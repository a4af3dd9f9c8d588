//! redis-cli style connection flags beside `--url`: `--host`, `--port`, `--password`, `--user`,
//! on every subcommand that takes `--url`, against real servers; the password is never printed
//! or stored.

mod common;

use common::{TestServer, probe_cmd};

const PASSWORD: &str = "flag-sekrit-pw";

/// Nothing the command printed or wrote holds the password.
fn assert_no_password(output: &std::process::Output, dir: Option<&std::path::Path>) {
    assert!(!String::from_utf8_lossy(&output.stdout).contains(PASSWORD));
    assert!(!String::from_utf8_lossy(&output.stderr).contains(PASSWORD));
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
    let output = probe_cmd()
        .args(flags)
        .args(["--writer-sizes", "1M", "--gap", "50ms", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains(&format!("127.0.0.1:{port}")));
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
        let output = probe_cmd().args(args).args(flags).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        // calibrate judges its accuracy, which a busy shared host can fail (exit 1); it got
        // through to the server all the same.
        let ok = if args[0] == "calibrate" {
            &[0, 1][..]
        } else {
            &[0][..]
        };
        assert!(
            ok.contains(&output.status.code().unwrap_or(-1)) && !stderr.contains("NOAUTH"),
            "{args:?}: {stderr}"
        );
        assert_no_password(&output, None);
    }

    // A wrong password is refused by the server, and not printed either.
    let output = probe_cmd()
        .args([
            "--port",
            &port,
            "--password",
            "not-the-flag-pw",
            "--duration",
            "1s",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&output.stderr).contains("not-the-flag-pw"));
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
    let output = probe_cmd()
        .args([
            "--port",
            &port,
            "--user",
            "flaguser",
            "--password",
            PASSWORD,
        ])
        .args(["--dry-run", "--duration", "1s"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!(
            "target: redis://flaguser@127.0.0.1:{port} (password: given, not shown)"
        )),
        "{stdout}"
    );
    let output = probe_cmd()
        .args([
            "--port",
            &port,
            "--user",
            "flaguser",
            "--password",
            PASSWORD,
        ])
        .args(["--duration", "1s"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_no_password(&output, None);
    // The same user with another password: refused.
    let output = probe_cmd()
        .args(["--port", &port, "--user", "flaguser", "--password", "nope"])
        .args(["--duration", "1s"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
}
