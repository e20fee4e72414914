//! `idmint serve` with TLS as a real process: `--tls-cert`/`--tls-key` and the `[server]`
//! `tls_cert`/`tls_key` keys, with a certificate made at test time
//! (`idmint_testkit::certs::TestCerts`); `redis-cli --tls` (which scripts/test.sh installs) gets
//! an id from the RESP port, trusting only the test's CA. A certificate file that is not one
//! stops the node before it listens, naming the file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use idmint_testkit::certs::TestCerts;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(60);

fn idmint() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idmint"));
    cmd.env_remove("IDMINT_SERVER")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    cmd
}

/// Runs `cmd` until it prints its RESP line; checks the HTTP line says `https://`, then gets an
/// id with `redis-cli --tls`, and kills the node.
fn serves_tls(mut cmd: Command, certs: &TestCerts) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = lines.recv_timeout(DEADLINE).expect("a listening line");
    assert!(first.starts_with("idmint listening on https://"), "{first}");
    let resp = loop {
        let line = lines.recv_timeout(DEADLINE).expect("the RESP line");
        if let Some(addr) = line.strip_prefix("idmint RESP listening on ") {
            break addr.trim().to_owned();
        }
    };
    let port = resp.rsplit(':').next().unwrap();
    let out = Command::new("redis-cli")
        .args(["--tls", "--cacert"])
        .arg(certs.ca_file())
        .args(["-h", "localhost", "-p", port, "INCR", "photos"])
        .output()
        .expect("redis-cli must be installed (apt-get install redis-tools)");
    let _ = child.kill();
    let _ = child.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.trim(),
        "1",
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn flags_and_config_keys_serve_tls() {
    let certs = TestCerts::new();
    let dir = tempfile::tempdir().unwrap();
    let mut flags = idmint();
    flags
        .args([
            "serve",
            "--init",
            "--http",
            "127.0.0.1:0",
            "--resp",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("a"))
        .arg("--tls-cert")
        .arg(certs.cert_file())
        .arg("--tls-key")
        .arg(certs.key_file());
    serves_tls(flags, &certs);

    let config = dir.path().join("idmint.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nresp = \"127.0.0.1:0\"\ntls_cert = {:?}\ntls_key = {:?}\n",
            certs.cert_file(),
            certs.key_file()
        ),
    )
    .unwrap();
    let mut keys = idmint();
    keys.args(["serve", "--init", "--http", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.path().join("b"))
        .arg("--config")
        .arg(&config);
    serves_tls(keys, &certs);
}

#[test]
fn a_bad_certificate_file_stops_the_node_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("not-a-cert.pem");
    std::fs::write(&bad, "hello\n").unwrap();
    let out = idmint()
        .args(["serve", "--init", "--http", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.path().join("d"))
        .arg("--tls-cert")
        .arg(&bad)
        .arg("--tls-key")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not-a-cert.pem"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).is_empty());
    // Half a pair is a usage error.
    let out = idmint()
        .args(["serve", "--tls-cert"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
