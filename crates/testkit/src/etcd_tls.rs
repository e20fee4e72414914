//! A private etcd that serves its clients over TLS only: [`PrivateEtcdTls`] runs a real `etcd`
//! (the `etcd-server` Debian package, or `IDMINT_TEST_ETCD_BIN`) on free ports of 127.0.0.1
//! with `--cert-file`/`--key-file` from a certificate made at test time
//! ([`crate::certs::TestCerts`]), a temporary data directory, and kills it when dropped.
//!
//! Invariants: the client URL is `https://127.0.0.1:PORT` and nothing else serves the client
//! API; the health check goes to a separate plain-HTTP metrics URL (`/health`), so the kit needs
//! no TLS client. [`PrivateEtcdTls::start`] returns once the member is healthy. Authentication
//! is off at start: a test enables it through the client API (etcd has no flag for it); login
//! tokens then live 2 s (`--auth-token-ttl 2`), so a test sees them expire.
//!
//! What it does not do: clusters of several members, client certificates, restarts.

use crate::certs::TestCerts;
use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BINARY_ENV: &str = "IDMINT_TEST_ETCD_BIN";
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A running private etcd with TLS on its client URL; killed when dropped.
#[derive(Debug)]
pub struct PrivateEtcdTls {
    child: Option<Child>,
    dir: TempDir,
    client_port: u16,
}

impl PrivateEtcdTls {
    /// Starts a fresh member serving `certs`' certificate and waits until it is healthy.
    ///
    /// # Panics
    /// If the binary is missing, or the member is not healthy within 30 s (with its log).
    pub async fn start(certs: &TestCerts) -> PrivateEtcdTls {
        let binary = std::env::var(BINARY_ENV).unwrap_or_else(|_| "etcd".to_owned());
        let mut last = String::new();
        for _ in 0..3 {
            let (client_port, peer_port, metrics_port) = (free_port(), free_port(), free_port());
            let dir = tempfile::Builder::new()
                .prefix("idmint-etcd-tls-")
                .tempdir()
                .unwrap_or_else(|e| panic!("cannot create etcd's directory: {e}"));
            let log = File::create(dir.path().join("etcd.log"))
                .unwrap_or_else(|e| panic!("cannot create etcd's log: {e}"));
            let client = format!("https://127.0.0.1:{client_port}");
            let peer = format!("http://127.0.0.1:{peer_port}");
            let child = Command::new(&binary)
                .args(["--name", "idmint-tls", "--data-dir"])
                .arg(dir.path().join("data"))
                .args([
                    "--listen-client-urls",
                    &client,
                    "--advertise-client-urls",
                    &client,
                ])
                .args([
                    "--listen-peer-urls",
                    &peer,
                    "--initial-advertise-peer-urls",
                    &peer,
                ])
                .arg("--initial-cluster")
                .arg(format!("idmint-tls={peer}"))
                .args(["--initial-cluster-state", "new"])
                .arg("--cert-file")
                .arg(certs.cert_file())
                .arg("--key-file")
                .arg(certs.key_file())
                .arg("--listen-metrics-urls")
                .arg(format!("http://127.0.0.1:{metrics_port}"))
                // Short, so a test sees login tokens expire (once auth is on).
                .args(["--auth-token-ttl", "2"])
                .args(["--logger", "zap", "--log-level", "warn"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot start `{binary}`: {e} (install it: `apt-get install etcd-server`, \
                         or set {BINARY_ENV})"
                    )
                });
            let mut etcd = PrivateEtcdTls {
                child: Some(child),
                dir,
                client_port,
            };
            let metrics = SocketAddr::from(([127, 0, 0, 1], metrics_port));
            match etcd.wait_ready(metrics).await {
                Ok(()) => return etcd,
                Err(e) => last = e,
            }
        }
        panic!("the private etcd with TLS did not start: {last}")
    }

    /// The client URL, `https://HOST:PORT` with `host` `127.0.0.1` or `localhost` (both are in
    /// the test certificate).
    pub fn client_url(&self, host: &str) -> String {
        format!("https://{host}:{}", self.client_port)
    }

    async fn wait_ready(&mut self, metrics: SocketAddr) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("etcd exited ({status}): {}", self.log()));
                }
            }
            if health(metrics).await {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(format!(
                    "not healthy within {READY_TIMEOUT:?}: {}",
                    self.log()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }
}

impl Drop for PrivateEtcdTls {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot find a free port: {e}"))
}

/// Whether `GET /health` on the metrics URL answers healthy (within a second).
async fn health(addr: SocketAddr) -> bool {
    let check = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream
            .write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&reply).contains("\"health\":\"true\""))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), check).await,
        Ok(Ok(true))
    )
}
