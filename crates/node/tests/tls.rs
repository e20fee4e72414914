//! TLS on the node's listeners (`server.tls_cert` / `tls_key`, src/tls.rs), end to end: a node
//! served in process with HTTP, gRPC and RESP over TLS on `127.0.0.1:0`, a CA and a server
//! certificate made at test time (`idmint_testkit::certs`), and clients that trust only that CA:
//! HTTP/1.1 over a tokio-rustls stream for HTTPS (reqwest's rustls feature would need a
//! process-wide crypto provider in every other test of this crate), tonic's client (rustls) for
//! gRPC, a tokio-rustls stream for RESP; and two TLS stacks idmint did not write: `redis-cli
//! --tls` (OpenSSL) on the RESP port and Python's `grpcio` (BoringSSL,
//! `tests/grpc_tls_client.py`) on the gRPC port.
//!
//! What is checked: ids over each protocol; ALPN (`http/1.1`, `h2`); a plain-text request to a
//! TLS port fails cleanly and the node goes on serving; a client stalled in the handshake is
//! closed after `header_read_timeout_ms` and frees its connection slot; a client that does not
//! trust the CA is refused.
//!
//! No test sleeps to order events: every wait polls a condition against a generous deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use idmint_node::grpc::proto;
use idmint_node::grpc::proto::idmint_client::IdmintClient;
use idmint_node::tls::ServerTls;
use idmint_node::{ListenConfig, Node, NodeConfig, Shutdown, ShutdownReport};
use idmint_store::MemoryAuthority;
use idmint_testkit::certs::TestCerts;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

const DEADLINE: Duration = Duration::from_secs(30);

/// A node serving HTTP, gRPC and RESP over TLS.
struct TlsNode {
    http: SocketAddr,
    grpc: SocketAddr,
    resp: SocketAddr,
    certs: TestCerts,
    shutdown: Shutdown,
    served: tokio::task::JoinHandle<Result<ShutdownReport, idmint_node::NodeError>>,
}

impl TlsNode {
    async fn start(listen: ListenConfig) -> TlsNode {
        let certs = TestCerts::new();
        let tls = ServerTls::load(&certs.cert_file(), &certs.key_file()).unwrap();
        let config = NodeConfig {
            listen,
            ..NodeConfig::default()
        };
        let node = Node::start(config, Arc::new(MemoryAuthority::new()))
            .await
            .unwrap();
        let bind = || async { TcpListener::bind("127.0.0.1:0").await.unwrap() };
        let (http, grpc, resp) = (bind().await, bind().await, bind().await);
        let addrs = (
            http.local_addr().unwrap(),
            grpc.local_addr().unwrap(),
            resp.local_addr().unwrap(),
        );
        let server = idmint_node::Server::new(node)
            .tls(Some(tls))
            .http(http)
            .grpc(grpc)
            .resp(resp);
        let shutdown = server.shutdown_handle();
        let served = tokio::spawn(server.serve());
        TlsNode {
            http: addrs.0,
            grpc: addrs.1,
            resp: addrs.2,
            certs,
            shutdown,
            served,
        }
    }

    /// A rustls client configuration trusting only this node's CA, announcing `alpn`.
    fn client_config(&self, alpn: &[&[u8]]) -> rustls::ClientConfig {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.certs.ca_pem.as_bytes()).unwrap())
            .unwrap();
        let mut config = rustls::ClientConfig::builder_with_provider(idmint_node::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        config
    }

    /// `GET path` over HTTPS to the server name `host` (certificate checked against it), on
    /// a connection of its own: the status and the body.
    async fn https_get(&self, host: &str, path: &str) -> (u16, Vec<u8>) {
        let mut stream = self
            .tls_stream_to(self.http, host, &[b"http/1.1"])
            .await
            .unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        // The server may close without a TLS close_notify: what was read is the answer.
        let _ = tokio::time::timeout(DEADLINE, stream.read_to_end(&mut raw))
            .await
            .expect("an answer");
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no header end: {:?}", String::from_utf8_lossy(&raw)));
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status: {head}"));
        (status, raw[split + 4..].to_vec())
    }

    /// `count` ids of `ns` over HTTPS (by the name `host`), as the JSON strings.
    async fn https_ids(&self, host: &str, ns: &str, count: u64) -> Vec<String> {
        let path = format!("/v1/ids/{ns}?count={count}");
        let (status, body) = self.https_get(host, &path).await;
        assert_eq!(
            status,
            200,
            "GET {path}: {}",
            String::from_utf8_lossy(&body)
        );
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        body["ids"]
            .as_array()
            .unwrap_or_else(|| panic!("no ids: {body}"))
            .iter()
            .map(|id| id.as_str().unwrap().to_owned())
            .collect()
    }

    /// A TLS stream to `addr` trusting this node's CA, checking the name `localhost`.
    async fn tls_stream(
        &self,
        addr: SocketAddr,
        alpn: &[&[u8]],
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        self.tls_stream_to(addr, "localhost", alpn).await
    }

    /// A TLS stream to `addr` trusting this node's CA, checking the name `host`.
    async fn tls_stream_to(
        &self,
        addr: SocketAddr,
        host: &str,
        alpn: &[&[u8]],
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(self.client_config(alpn)));
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from(host.to_owned()).unwrap();
        connector.connect(name, tcp).await
    }

    async fn stop(self) -> ShutdownReport {
        self.shutdown.drain();
        tokio::time::timeout(DEADLINE, self.served)
            .await
            .expect("the node stops")
            .unwrap()
            .unwrap()
    }
}

/// Reads until the peer closes (`Ok(0)`) or errors, for at most `DEADLINE`; what was read.
async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(DEADLINE, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the node closes the connection");
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_requests_get_ids_by_name_and_by_address() {
    let node = TlsNode::start(ListenConfig::default()).await;
    assert_eq!(node.https_ids("localhost", "photos", 3).await.len(), 3);
    let more = node.https_ids("127.0.0.1", "photos", 2).await;
    assert_eq!(more.len(), 2);
    // ALPN: the HTTP listener speaks HTTP/1.1 and says so.
    let stream = node
        .tls_stream(node.http, &[b"h2", b"http/1.1"])
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_text_to_a_tls_port_fails_cleanly_and_the_node_goes_on() {
    let node = TlsNode::start(ListenConfig::default()).await;
    // A raw plain-text request: answered with a TLS alert at most, then closed.
    let mut tcp = TcpStream::connect(node.http).await.unwrap();
    tcp.write_all(b"GET /v1/ids/photos HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let got = read_to_close(&mut tcp).await;
    assert!(
        !String::from_utf8_lossy(&got).contains("HTTP/1.1"),
        "a TLS port must not answer plain HTTP: {got:?}"
    );
    // The same through reqwest: an error, not a hang.
    let plain = reqwest::Client::builder()
        .timeout(DEADLINE)
        .build()
        .unwrap();
    let url = format!("http://127.0.0.1:{}/v1/ids/photos", node.http.port());
    assert!(plain.get(&url).send().await.is_err());
    // Plain RESP to the TLS RESP port: closed, no answer.
    let mut tcp = TcpStream::connect(node.resp).await.unwrap();
    tcp.write_all(b"*2\r\n$4\r\nINCR\r\n$6\r\nphotos\r\n")
        .await
        .unwrap();
    let got = read_to_close(&mut tcp).await;
    assert!(!got.starts_with(b":"), "plain RESP answered: {got:?}");
    // A client that does not trust the CA is refused, and one that dials a name the
    // certificate does not hold.
    let stranger = rustls::ClientConfig::builder_with_provider(idmint_node::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(stranger));
    let tcp = TcpStream::connect(node.http).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    assert!(connector.connect(name, tcp).await.is_err());
    assert!(node
        .tls_stream_to(node.http, "elsewhere.example", &[])
        .await
        .is_err());
    // The node serves on.
    assert_eq!(node.https_ids("localhost", "photos", 1).await.len(), 1);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stalled_in_the_handshake_is_closed_and_frees_its_slot() {
    let listen = ListenConfig {
        header_read_timeout: Duration::from_millis(300),
        max_connections: 1,
        ..ListenConfig::default()
    };
    let node = TlsNode::start(listen).await;
    for addr in [node.http, node.grpc, node.resp] {
        // Connects, sends nothing: holds the only slot until the handshake deadline.
        let mut stalled = TcpStream::connect(addr).await.unwrap();
        let started = std::time::Instant::now();
        let got = read_to_close(&mut stalled).await;
        assert!(got.is_empty(), "{addr}: {got:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "{addr}");
    }
    // The slot is free again: a real client is served.
    assert_eq!(node.https_ids("localhost", "photos", 1).await.len(), 1);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_tls_with_the_tonic_client() {
    let node = TlsNode::start(ListenConfig::default()).await;
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&node.certs.ca_pem))
        .domain_name("localhost");
    let channel = Endpoint::from_shared(format!("https://localhost:{}", node.grpc.port()))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = IdmintClient::new(channel);
    let ids = client
        .next(proto::NextRequest {
            namespace: "photos".into(),
            count: Some(5),
            shard: None,
            key: None,
        })
        .await
        .unwrap()
        .into_inner();
    match ids.ids {
        Some(proto::ids::Ids::U64(u)) => assert_eq!(u.ids.len(), 5),
        other => panic!("expected u64 ids, got {other:?}"),
    }
    // ALPN: the gRPC listener speaks HTTP/2 and says so.
    let stream = node.tls_stream(node.grpc, &[b"h2"]).await.unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    // A plain-text (h2c) client cannot use the TLS port, and the node serves on.
    let plain = Endpoint::from_shared(format!("http://127.0.0.1:{}", node.grpc.port()))
        .unwrap()
        .connect()
        .await;
    if let Ok(channel) = plain {
        let answer = IdmintClient::new(channel)
            .next(proto::NextRequest {
                namespace: "photos".into(),
                count: Some(1),
                shard: None,
                key: None,
            })
            .await;
        assert!(answer.is_err(), "h2c answered on a TLS port");
    }
    let again = client
        .next(proto::NextRequest {
            namespace: "photos".into(),
            count: Some(1),
            shard: None,
            key: None,
        })
        .await;
    assert!(again.is_ok());
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_over_tls() {
    let node = TlsNode::start(ListenConfig::default()).await;
    let mut stream = node.tls_stream(node.resp, &[]).await.unwrap();
    stream
        .write_all(b"*2\r\n$4\r\nINCR\r\n$6\r\nphotos\r\n*1\r\n$4\r\nPING\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    tokio::time::timeout(DEADLINE, async {
        while !got.ends_with(b"+PONG\r\n") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed early: {got:?}");
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("RESP answers over TLS");
    let text = String::from_utf8(got).unwrap();
    assert!(text.starts_with(':'), "{text}");
    node.stop().await;
}

/// `redis-cli --tls`: a Redis client idmint did not write, over TLS (scripts/test.sh installs
/// `redis-tools`). Fails, never skips, when it is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_speaks_tls() {
    let node = TlsNode::start(ListenConfig::default()).await;
    let (port, ca) = (node.resp.port().to_string(), node.certs.ca_file());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("redis-cli")
            .args(["--tls", "--cacert"])
            .arg(ca)
            .args(["-h", "localhost", "-p", &port, "INCR", "photos"])
            .output()
            .expect("redis-cli must be installed (apt-get install redis-tools)")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "1", "{stdout}");
    node.stop().await;
}

/// Python's `grpcio` over TLS (tests/grpc_tls_client.py): BoringSSL, a TLS stack idmint did not
/// write, checking the certificate against the test's CA. Fails, never skips, when python3 or
/// its grpc packages are missing (`python3 -m pip install grpcio grpcio-tools`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_grpcio_client_speaks_tls() {
    let node = TlsNode::start(ListenConfig::default()).await;
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let proto_root = here.join("../../proto");
    let script = here.join("tests/grpc_tls_client.py");
    let addr = format!("localhost:{}", node.grpc.port());
    let ca = node.certs.ca_file();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(script)
            .arg(addr)
            .arg(proto_root)
            .arg(ca)
            .output()
            .expect("python3 must be installed for this test")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python client failed (install grpcio and grpcio-tools with pip if missing):\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("python grpcio tls client: all checks passed"),
        "{stdout}"
    );
    node.stop().await;
}

/// A key that is not the certificate's is refused at load, naming both files.
#[test]
fn a_key_of_another_certificate_is_refused_naming_the_files() {
    let (one, two) = (TestCerts::new(), TestCerts::new());
    let e = ServerTls::load(&one.cert_file(), &two.key_file())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&one.cert_file().display().to_string())
            && e.contains(&two.key_file().display().to_string()),
        "{e}"
    );
    // The certificate where the key should be: no key in it.
    let e = ServerTls::load(&one.cert_file(), &one.cert_file())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no PEM private key"), "{e}");
}
