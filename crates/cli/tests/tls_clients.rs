//! Every client path to a TLS node, with real processes and certificates made at test time
//! (`idmint_testkit::certs::TestCerts`): the CLI (`next`, `status`, `decode --namespace`,
//! `admin rebase`, `admin retire`) over `https://` with `--ca-file` or `IDMINT_CA_FILE`;
//! idmint-client over gRPC with a CA; a regional node (`kind = "upstream"`) leasing from a
//! global node over `https://`; mutual TLS on every listener (`--tls-client-ca`): HTTP (the CLI
//! with `--cert`/`--key` or `IDMINT_CERT`/`IDMINT_KEY`), gRPC (idmint-client) and RESP
//! (`redis-cli --tls`, which scripts/test.sh installs); and SIGHUP reloading the certificate
//! while a connection opened before stays served (and, without TLS, changing nothing: the
//! signal's default action would stop the node).
//!
//! What is refused is refused with a non-zero exit (or an error) and a message that says why:
//! a CA that did not sign the node's certificate, no client certificate or one of another CA,
//! a file that is not there. Nothing sleeps to order events: every wait polls a condition
//! against a deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_client::{BlockingClient, ClientConfig, ClientError, ClientTls};
use idmint_testkit::certs::TestCerts;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{idmint, Server, DEADLINE};

/// A running `idmint serve` with HTTP, gRPC and RESP over TLS.
struct TlsNode {
    server: Server,
    grpc: SocketAddr,
    resp: SocketAddr,
}

impl TlsNode {
    /// Starts a node in `dir/name` with `certs`' server certificate, `client_ca` (mutual TLS)
    /// if given, and the configuration `config`.
    fn start(
        dir: &Path,
        name: &str,
        certs: &TestCerts,
        client_ca: Option<&Path>,
        config: &str,
    ) -> TlsNode {
        let config_file = dir.join(format!("{name}.toml"));
        std::fs::write(&config_file, config).unwrap();
        let server = Server::start_with(
            dir,
            &dir.join(name),
            "127.0.0.1:0",
            Some(&config_file),
            |cmd| {
                cmd.args(["--grpc", "127.0.0.1:0", "--resp", "127.0.0.1:0"])
                    .arg("--tls-cert")
                    .arg(certs.cert_file())
                    .arg("--tls-key")
                    .arg(certs.key_file());
                if let Some(ca) = client_ca {
                    cmd.arg("--tls-client-ca").arg(ca);
                }
            },
        );
        let address = |prefix: &str| -> SocketAddr {
            let line = server.next_line();
            line.strip_prefix(prefix)
                .unwrap_or_else(|| panic!("expected {prefix:?}, got {line:?}"))
                .trim()
                .parse()
                .unwrap()
        };
        let grpc = address("idmint gRPC listening on ");
        let resp = address("idmint RESP listening on ");
        TlsNode { server, grpc, resp }
    }

    /// The HTTP API's url, by the name its certificate holds.
    fn url(&self) -> String {
        format!("https://localhost:{}", self.server.addr.port())
    }

    /// The gRPC url.
    fn grpc_url(&self) -> String {
        format!("https://localhost:{}", self.grpc.port())
    }
}

/// Runs the CLI with `args` and the environment `env`, none of the TLS or token variables
/// inherited.
fn cli(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd: Command = idmint();
    for var in [
        "IDMINT_CA_FILE",
        "IDMINT_CERT",
        "IDMINT_KEY",
        "IDMINT_TOKEN",
    ] {
        cmd.env_remove(var);
    }
    cmd.args(args);
    for (key, value) in env {
        cmd.env(key, value);
    }
    cmd.output().unwrap()
}

/// The stdout of a CLI run that must succeed.
fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The stderr of a CLI run that must fail with exit 1.
fn refused(out: Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{what} must fail: stdout {} stderr {stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(out.stdout.is_empty(), "{what}: printed {:?}", out.stdout);
    stderr
}

fn ids(stdout: &str) -> Vec<u64> {
    stdout.lines().map(|l| l.trim().parse().unwrap()).collect()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A blocking idmint-client of `url` with `tls` (connecting checks that the node answers).
fn grpc_client(url: &str, tls: ClientTls) -> Result<BlockingClient, ClientError> {
    let mut config = ClientConfig::new([url.to_owned()]).with_tls(tls);
    config.op_timeout = Duration::from_secs(10);
    BlockingClient::connect_with(config, Arc::new(idmint_core::SystemClock::new()))
}

#[test]
fn cli_and_client_library_trust_the_ca_they_are_given() {
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCerts::new();
    let node = TlsNode::start(
        dir.path(),
        "node",
        &certs,
        None,
        "[namespaces.orders]\nkind = \"sequence\"\n[namespaces.legacy]\nkind = \"sequence\"\n",
    );
    let url = node.url();
    let ca = certs.ca_file();
    let with_ca = [("IDMINT_CA_FILE", ca.as_path())];

    // next, with the flag and with the variable.
    let first = ids(&ok(
        cli(
            &[
                "next",
                "orders",
                "-n",
                "3",
                "--server",
                &url,
                "--ca-file",
                path(&ca),
            ],
            &[],
        ),
        "next --ca-file",
    ));
    assert_eq!(first.len(), 3);
    let more = ids(&ok(
        cli(&["next", "orders", "--server", &url], &with_ca),
        "next with IDMINT_CA_FILE",
    ));
    assert!(more[0] > first[2], "{first:?} then {more:?}");

    // status, decode --namespace, admin rebase and retire.
    let status = ok(
        cli(&["status", "--server", &url], &with_ca),
        "status with IDMINT_CA_FILE",
    );
    assert!(
        status.contains("orders") && status.contains("legacy"),
        "{status}"
    );
    let status = ok(
        cli(&["status", "--server", &url, "--ca-file", path(&ca)], &[]),
        "status --ca-file",
    );
    assert!(status.contains("orders"), "{status}");
    let decoded = ok(
        cli(
            &[
                "decode",
                &more[0].to_string(),
                "--namespace",
                "orders",
                "--server",
                &url,
            ],
            &with_ca,
        ),
        "decode --namespace",
    );
    assert!(decoded.contains("sequence"), "{decoded}");
    let rebased = ok(
        cli(
            &[
                "admin",
                "rebase",
                "orders",
                "--above",
                "1000000",
                "--server",
                &url,
                "--ca-file",
                path(&ca),
            ],
            &[],
        ),
        "admin rebase --ca-file",
    );
    assert!(rebased.contains("watermark"), "{rebased}");
    let rebased = ok(
        cli(
            &[
                "admin", "rebase", "orders", "--above", "2000000", "--server", &url,
            ],
            &with_ca,
        ),
        "admin rebase with IDMINT_CA_FILE",
    );
    assert!(rebased.contains("2000001"), "{rebased}");
    let after = ids(&ok(
        cli(&["next", "orders", "--server", &url], &with_ca),
        "next after the rebase",
    ));
    assert!(after[0] > 2_000_000, "{after:?}");
    let retired = ok(
        cli(
            &["admin", "retire", "legacy", "--yes", "--server", &url],
            &with_ca,
        ),
        "admin retire",
    );
    assert!(retired.contains("retired"), "{retired}");

    // Refused, saying why: another CA, the public roots, a file that is not there.
    let other = TestCerts::new();
    let e = refused(
        cli(
            &[
                "next",
                "orders",
                "--server",
                &url,
                "--ca-file",
                path(&other.ca_file()),
            ],
            &[],
        ),
        "a CA that did not sign the node's certificate",
    );
    assert!(
        e.contains("invalid peer certificate") && e.contains("cannot reach"),
        "{e}"
    );
    let e = refused(
        cli(&["status", "--server", &url], &[]),
        "the public roots only",
    );
    assert!(e.contains("invalid peer certificate"), "{e}");
    let e = refused(
        cli(
            &[
                "admin", "rebase", "orders", "--above", "5", "--server", &url,
            ],
            &[("IDMINT_CA_FILE", other.ca_file().as_path())],
        ),
        "rebase with another CA",
    );
    assert!(e.contains("invalid peer certificate"), "{e}");
    let nowhere = dir.path().join("nowhere.pem");
    let e = refused(
        cli(
            &[
                "next",
                "orders",
                "--server",
                &url,
                "--ca-file",
                path(&nowhere),
            ],
            &[],
        ),
        "a CA file that is not there",
    );
    assert!(
        e.contains("nowhere.pem") && e.contains("cannot read"),
        "{e}"
    );
    let e = refused(
        cli(
            &[
                "next",
                "orders",
                "--server",
                &url,
                "--ca-file",
                path(&certs.key_file()),
            ],
            &[],
        ),
        "a key given as the CA",
    );
    assert!(
        e.contains("server.key") && e.contains("no PEM certificate"),
        "{e}"
    );

    // idmint-client over gRPC: the node's CA, as a file and as PEM; another CA is refused.
    let client = grpc_client(
        &node.grpc_url(),
        ClientTls::from_files(Some(&ca), None).unwrap(),
    )
    .unwrap();
    assert!(client.next("orders").unwrap().as_u64().unwrap() > 2_000_000);
    client.close().unwrap();
    let pem = ClientTls::from_pem(Some(certs.ca_pem.as_bytes()), None).unwrap();
    let client = grpc_client(&node.grpc_url(), pem).unwrap();
    client.next("events").unwrap();
    client.close().unwrap();
    let stranger = grpc_client(
        &node.grpc_url(),
        ClientTls::from_files(Some(&other.ca_file()), None).unwrap(),
    );
    match stranger {
        Err(ClientError::Unavailable { message, .. }) => {
            assert!(message.contains("invalid peer certificate"), "{message}")
        }
        other => panic!("a client that does not trust the node's CA got {other:?}"),
    }
}

#[test]
fn mutual_tls_listeners_serve_only_clients_with_a_certificate_of_the_client_ca() {
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCerts::new();
    let node = TlsNode::start(
        dir.path(),
        "node",
        &certs,
        Some(&certs.ca_file()),
        "[server]\nauto_create = true\n",
    );
    let url = node.url();
    let ca = certs.ca_file();
    let (cert, key) = certs.client_files("operator");
    let other = TestCerts::new();
    let (their_cert, their_key) = other.client_files("stranger");

    // HTTP: the CLI.
    let e = refused(
        cli(
            &["next", "photos", "--server", &url, "--ca-file", path(&ca)],
            &[],
        ),
        "HTTP without a client certificate",
    );
    assert!(e.contains("cannot reach"), "{e}");
    refused(
        cli(
            &[
                "next",
                "photos",
                "--server",
                &url,
                "--ca-file",
                path(&ca),
                "--cert",
                path(&their_cert),
                "--key",
                path(&their_key),
            ],
            &[],
        ),
        "HTTP with a certificate of another CA",
    );
    let e = refused(
        cli(
            &[
                "next",
                "photos",
                "--server",
                &url,
                "--ca-file",
                path(&ca),
                "--cert",
                path(&cert),
            ],
            &[],
        ),
        "--cert without --key",
    );
    assert!(e.contains("--cert (IDMINT_CERT) needs --key"), "{e}");
    let got = ids(&ok(
        cli(
            &[
                "next",
                "photos",
                "-n",
                "2",
                "--server",
                &url,
                "--ca-file",
                path(&ca),
                "--cert",
                path(&cert),
                "--key",
                path(&key),
            ],
            &[],
        ),
        "HTTP with --cert and --key",
    ));
    assert_eq!(got.len(), 2);
    let env = [
        ("IDMINT_CA_FILE", ca.as_path()),
        ("IDMINT_CERT", cert.as_path()),
        ("IDMINT_KEY", key.as_path()),
    ];
    let status = ok(
        cli(&["status", "--server", &url], &env),
        "status with IDMINT_CERT",
    );
    assert!(status.contains("photos"), "{status}");

    // gRPC: idmint-client.
    let anonymous = grpc_client(
        &node.grpc_url(),
        ClientTls::from_files(Some(&ca), None).unwrap(),
    );
    assert!(
        matches!(anonymous, Err(ClientError::Unavailable { .. })),
        "gRPC without a client certificate: {anonymous:?}"
    );
    let foreign = grpc_client(
        &node.grpc_url(),
        ClientTls::from_files(Some(&ca), Some((&their_cert, &their_key))).unwrap(),
    );
    assert!(
        matches!(foreign, Err(ClientError::Unavailable { .. })),
        "gRPC with a certificate of another CA: {foreign:?}"
    );
    let known = grpc_client(
        &node.grpc_url(),
        ClientTls::from_files(Some(&ca), Some((&cert, &key))).unwrap(),
    )
    .unwrap();
    assert!(known.next("photos").unwrap().as_u64().unwrap() > got[1]);
    known.close().unwrap();

    // RESP: redis-cli (OpenSSL).
    let incr = |identity: Option<(&PathBuf, &PathBuf)>| {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["--tls", "--cacert"]).arg(&ca);
        if let Some((cert, key)) = identity {
            cmd.arg("--cert").arg(cert).arg("--key").arg(key);
        }
        let out = cmd
            .args([
                "-h",
                "localhost",
                "-p",
                &node.resp.port().to_string(),
                "INCR",
                "photos",
            ])
            .output()
            .expect("redis-cli must be installed (apt-get install redis-tools)");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let answer = incr(None);
    assert!(
        answer.parse::<u64>().is_err(),
        "RESP without a certificate answered {answer}"
    );
    let answer = incr(Some((&their_cert, &their_key)));
    assert!(
        answer.parse::<u64>().is_err(),
        "RESP with another CA's answered {answer}"
    );
    let id: u64 = incr(Some((&cert, &key))).parse().unwrap();
    assert!(id > got[1]);
}

/// A port the kernel just gave and took back, for a `--grpc` address a configuration must name
/// before the process starts.
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[test]
fn a_regional_node_leases_from_a_global_node_over_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCerts::new();
    let global = TlsNode::start(
        dir.path(),
        "global",
        &certs,
        Some(&certs.ca_file()),
        "[server]\nauto_create = true\n",
    );
    let (cert, key) = certs.client_files("regional");
    let toml = |p: &Path| support::toml_string(p.to_str().unwrap());
    // The first url is plain and down: a list may mix http:// and https://.
    let regional_config = |identity: bool| {
        let mut text = format!(
            "[authority]\nkind = \"upstream\"\nurls = [\"http://{}\", \"{}\"]\nca_file = {}\n",
            free_port(),
            global.grpc_url(),
            toml(&certs.ca_file())
        );
        if identity {
            text.push_str(&format!(
                "client_cert = {}\nclient_key = {}\n",
                toml(&cert),
                toml(&key)
            ));
        }
        text
    };
    let written = |name: &str, text: String| {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        file
    };

    let regional_cfg = written("regional.toml", regional_config(true));
    let regional = Server::start(
        dir.path(),
        &dir.path().join("regional"),
        Some(&regional_cfg),
    );
    let regional_url = format!("http://{}", regional.addr);
    let got = ids(&ok(
        cli(
            &["next", "orders", "-n", "5", "--server", &regional_url],
            &[],
        ),
        "ids from the regional node",
    ));
    assert_eq!(got.len(), 5);
    let env = [
        ("IDMINT_CA_FILE", certs.ca_file()),
        ("IDMINT_CERT", cert.clone()),
        ("IDMINT_KEY", key.clone()),
    ];
    let env: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (*k, v.as_path())).collect();
    let status = ok(
        cli(&["status", "--server", &global.url()], &env),
        "the global node's status",
    );
    assert!(
        status.contains("orders"),
        "the regional node's block came from it: {status}"
    );

    // Without a client certificate the global node refuses the regional node.
    let anonymous_cfg = written("anonymous.toml", regional_config(false));
    let anonymous = Server::start(
        dir.path(),
        &dir.path().join("anonymous"),
        Some(&anonymous_cfg),
    );
    let e = refused(
        cli(
            &[
                "next",
                "orders",
                "--server",
                &format!("http://{}", anonymous.addr),
            ],
            &[],
        ),
        "a regional node without a client certificate",
    );
    assert!(e.contains("authority_unavailable"), "{e}");

    // A TLS file that cannot be read stops the regional node, naming it.
    let broken = written(
        "broken.toml",
        regional_config(true).replace("regional.pem", "missing.pem"),
    );
    let exited = Server::try_spawn(support::serve_command(
        dir.path(),
        &dir.path().join("broken"),
        "127.0.0.1:0",
        Some(&broken),
    ))
    .err()
    .expect("a regional node with a missing client certificate must not start");
    assert!(
        exited.stderr.contains("client-missing.pem") && exited.stderr.contains("cannot read"),
        "{}",
        exited.stderr
    );
}

/// A TLS connection of the test's own to a node's HTTP port, kept open.
struct Connection {
    tls: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
}

impl Connection {
    /// Connects to `addr` as `localhost`, trusting `ca_pem`, and finishes the handshake.
    fn open(addr: SocketAddr, ca_pem: &str) -> Connection {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
            .unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let name = ServerName::try_from("localhost").unwrap();
        let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let tcp = TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock).unwrap();
        }
        Connection { tls }
    }

    /// The leaf certificate the node presented (DER).
    fn served(&self) -> Vec<u8> {
        self.tls.conn.peer_certificates().unwrap()[0].to_vec()
    }

    /// `GET path` on this connection, kept alive: the status.
    fn get(&mut self, path: &str) -> u16 {
        write!(self.tls, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        self.tls.flush().unwrap();
        let mut raw = Vec::new();
        let mut byte = [0u8; 1];
        while !raw.ends_with(b"\r\n\r\n") {
            self.tls.read_exact(&mut byte).unwrap();
            raw.push(byte[0]);
        }
        let head = String::from_utf8(raw).unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().unwrap())
            })
            .unwrap_or_else(|| panic!("no content-length in {head}"));
        let mut body = vec![0u8; length];
        self.tls.read_exact(&mut body).unwrap();
        head.split(' ').nth(1).unwrap().parse().unwrap()
    }
}

/// Polls `done` until it holds, panicking with `what` past the deadline.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {DEADLINE:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sighup_reloads_the_certificate_and_keeps_open_connections() {
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCerts::new();
    let first = certs.server("first");
    first.write_to(&certs.cert_file(), &certs.key_file());
    // Kept-alive connections stay open between requests for the whole test.
    let node = TlsNode::start(
        dir.path(),
        "node",
        &certs,
        None,
        "[server]\nheader_read_timeout_ms = 600000\nidle_timeout_ms = 600000\n",
    );
    let addr = node.server.addr;
    let mut open = Connection::open(addr, &certs.ca_pem);
    assert_eq!(open.served(), first.cert_der);
    assert_eq!(open.get("/healthz"), 200);

    let second = certs.server("second");
    second.write_to(&certs.cert_file(), &certs.key_file());
    node.server.signal("HUP");
    wait_until("a new connection gets the new certificate", || {
        Connection::open(addr, &certs.ca_pem).served() == second.cert_der
    });
    assert_eq!(
        open.get("/healthz"),
        200,
        "the connection opened before the reload"
    );
    assert_eq!(open.served(), first.cert_der);
    let log = node.server.stderr_so_far();
    assert!(
        log.contains("SIGHUP: reloaded the TLS certificate"),
        "{log}"
    );

    // A bad file: logged, naming it; the node keeps serving the certificate it had.
    std::fs::write(certs.cert_file(), "not a certificate\n").unwrap();
    node.server.signal("HUP");
    wait_until("the failed reload is logged", || {
        let log = node.server.stderr_so_far();
        log.contains("TLS files not reloaded") && log.contains("server.pem")
    });
    let fresh = Connection::open(addr, &certs.ca_pem);
    assert_eq!(fresh.served(), second.cert_der);
    assert_eq!(open.get("/healthz"), 200);
    let got = ids(&ok(
        cli(
            &["next", "photos", "--server", &node.url()],
            &[("IDMINT_CA_FILE", certs.ca_file().as_path())],
        ),
        "ids after a failed reload",
    ));
    assert_eq!(got.len(), 1);
}

#[test]
fn sighup_without_tls_changes_nothing_and_the_node_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &dir.path().join("data"), None);
    server.signal("HUP");
    wait_until("the SIGHUP is logged", || {
        server
            .stderr_so_far()
            .contains("SIGHUP: no TLS files to reload")
    });
    assert_eq!(support::http_get(server.addr, "/healthz").0, 200);
}
