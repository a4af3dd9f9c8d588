//! TLS against a real TLS-enabled redis-server, with certificates generated in the test.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{TestServer, probe_cmd, read_csv};
use predicates::prelude::*;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

struct Pki {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn make_pki(dir: &Path) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "holprobe test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf = |names: Vec<String>| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf(vec!["localhost".into(), "127.0.0.1".into()]);
    let (client_cert, client_key) = leaf(vec!["holprobe-client".into()]);
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        fs::write(&path, text).unwrap();
        path
    };
    Pki {
        ca: write("ca.pem", &ca.pem()),
        server_cert: write("server.pem", &server_cert),
        server_key: write("server.key", &server_key),
        client_cert: write("client.pem", &client_cert),
        client_key: write("client.key", &client_key),
    }
}

/// A redis-server with a TLS port that requires client certificates, and a password.
fn tls_server(pki: &Pki, tls_port: u16) -> TestServer {
    let settings = [
        format!("tls-port {tls_port}"),
        format!("tls-cert-file {}", pki.server_cert.display()),
        format!("tls-key-file {}", pki.server_key.display()),
        format!("tls-ca-cert-file {}", pki.ca.display()),
        "tls-auth-clients yes".to_string(),
        "requirepass tls-secret-pw".to_string(),
    ];
    let refs: Vec<&str> = settings.iter().map(String::as_str).collect();
    TestServer::start(&refs)
}

#[test]
fn a_run_over_tls_with_client_certificates_and_a_password() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let tls_port = holprobe::measure::target::free_port().unwrap();
    let _server = tls_server(&pki, tls_port);
    let out = dir.path().join("run");
    let assert = probe_cmd()
        .args([
            "--url",
            &format!("rediss://:tls-secret-pw@127.0.0.1:{tls_port}"),
        ])
        .arg("--tls-ca")
        .arg(&pki.ca)
        .arg("--tls-cert")
        .arg(&pki.client_cert)
        .arg("--tls-key")
        .arg(&pki.client_key)
        .args([
            "--writer-sizes",
            "1M,4M",
            "--gap",
            "100ms",
            "--probe-cmd",
            "get",
        ])
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let output = assert.get_output();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(all.contains("rediss://127.0.0.1"), "{all}");
    assert!(!all.contains("tls-secret-pw"), "password printed: {all}");
    for file in [
        "run.json",
        "probes.csv",
        "writes.csv",
        "summary.csv",
        "stalls.csv",
    ] {
        let text = fs::read_to_string(out.join(file)).unwrap();
        assert!(!text.contains("tls-secret-pw"), "password in {file}");
    }
    let writes = read_csv(&out.join("writes.csv"));
    assert_eq!(writes.len(), 4);
    assert!(writes.iter().all(|w| w["ok"] == "true"), "{writes:?}");
    let probes = read_csv(&out.join("probes.csv"));
    assert!(probes.iter().filter(|p| p["ok"] == "true").count() > 100);
}

#[test]
fn tls_without_the_right_ca_is_refused_and_insecure_skips_verification_only() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let other = tempfile::tempdir().unwrap();
    let stranger = make_pki(other.path());
    let tls_port = holprobe::measure::target::free_port().unwrap();
    let _server = tls_server(&pki, tls_port);
    let url = format!("rediss://:tls-secret-pw@127.0.0.1:{tls_port}");
    // A CA that did not sign the server's certificate.
    probe_cmd()
        .args(["--url", &url, "--duration", "200ms"])
        .arg("--tls-ca")
        .arg(&stranger.ca)
        .arg("--tls-cert")
        .arg(&pki.client_cert)
        .arg("--tls-key")
        .arg(&pki.client_key)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("error:"))
        .stderr(predicate::str::contains("tls-secret-pw").not());
    // --insecure accepts the unknown certificate; the client certificate is still needed.
    probe_cmd()
        .args(["--url", &url, "--duration", "300ms", "--insecure"])
        .arg("--tls-cert")
        .arg(&pki.client_cert)
        .arg("--tls-key")
        .arg(&pki.client_key)
        .assert()
        .success();
}

#[test]
fn tls_flags_need_a_rediss_url() {
    probe_cmd()
        .args([
            "--url",
            "redis://127.0.0.1:1",
            "--insecure",
            "--duration",
            "1s",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--insecure needs a TLS server"));
    probe_cmd()
        .args([
            "--url",
            "rediss://127.0.0.1:1",
            "--tls-ca",
            "/nonexistent.pem",
            "--duration",
            "1s",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--tls-ca"));
}
