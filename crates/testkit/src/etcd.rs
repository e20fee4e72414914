//! Private etcd servers for tests: [`PrivateEtcd`] runs a real `etcd` process (the
//! `etcd-server` Debian package, etcd 3.4+) on free ports of 127.0.0.1, with its own temporary
//! data directory, and kills it when dropped.
//!
//! Invariants: the server runs with etcd's default durability (the WAL is fsynced before a
//! write is acknowledged; `--unsafe-no-fsync` is never passed), so a test that kills it with
//! `SIGKILL` and starts it again ([`PrivateEtcd::restart`]) sees exactly what etcd promised.
//! A [`PrivateEtcd`] is ready (answers `GET /health` with `"health":"true"`) when
//! [`PrivateEtcd::start`] and [`PrivateEtcd::restart`] return.
//!
//! [`PrivateEtcd::start_in`] runs it in a host of a [`crate::netns::Lab`] instead, listening on
//! that host's address.
//!
//! What it does not do: clusters of several members, TLS or authentication. If the `etcd`
//! binary is missing it panics with how to install it; it never skips a test.

use crate::netns::Host;
use std::fs::{File, OpenOptions};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The binary started; override with the environment variable `IDMINT_TEST_ETCD_BIN`.
const DEFAULT_BINARY: &str = "etcd";
const BINARY_ENV: &str = "IDMINT_TEST_ETCD_BIN";
/// How long a fresh or restarted server may take to answer its health check.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const MEMBER_NAME: &str = "idmint-test";

/// A running private etcd server; killed (`SIGKILL`) when dropped, its data directory removed.
#[derive(Debug)]
pub struct PrivateEtcd {
    child: Option<Child>,
    binary: String,
    dir: TempDir,
    client_port: u16,
    peer_port: u16,
    /// The address it listens on, and the lab host it runs in (none: this namespace).
    ip: IpAddr,
    host: Option<Host>,
}

impl PrivateEtcd {
    /// Starts a fresh etcd on free ports with an empty data directory and waits until it is
    /// healthy.
    ///
    /// Panics, saying how to install it, if the `etcd` binary is not on `PATH`; panics with the
    /// server's log if it does not become healthy within 30 s.
    pub async fn start() -> PrivateEtcd {
        PrivateEtcd::start_on(None, IpAddr::V4(Ipv4Addr::LOCALHOST)).await
    }

    /// [`PrivateEtcd::start`] in `host`, listening on `addr` (the host's address on a LAN of
    /// its lab): reachable from the lab's hosts on that LAN only, and cut off with its link.
    pub async fn start_in(host: &Host, addr: Ipv4Addr) -> PrivateEtcd {
        PrivateEtcd::start_on(Some(host.clone()), IpAddr::V4(addr)).await
    }

    async fn start_on(host: Option<Host>, ip: IpAddr) -> PrivateEtcd {
        let binary = std::env::var(BINARY_ENV).unwrap_or_else(|_| DEFAULT_BINARY.to_owned());
        // Free ports are found by binding port 0 and letting go; another process may grab one
        // in between, so a server that fails to start is tried again on new ports.
        let mut last_failure = String::new();
        for _ in 0..3 {
            let (client_port, peer_port) = (free_port(), free_port());
            let mut etcd = PrivateEtcd {
                child: None,
                binary: binary.clone(),
                dir: tempfile::Builder::new()
                    .prefix("idmint-etcd-")
                    .tempdir()
                    .unwrap_or_else(|e| panic!("cannot create etcd's data directory: {e}")),
                client_port,
                peer_port,
                ip,
                host: host.clone(),
            };
            etcd.spawn();
            match etcd.wait_ready().await {
                Ok(()) => return etcd,
                Err(failure) => last_failure = failure,
            }
        }
        panic!("etcd did not start: {last_failure}");
    }

    /// The client URL, `http://127.0.0.1:PORT` (the lab host's address with
    /// [`PrivateEtcd::start_in`]).
    pub fn client_url(&self) -> String {
        format!("http://{}", self.client_addr())
    }

    /// The client address (for a [`crate::proxy::FaultProxy`] in front of it).
    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.client_port)
    }

    /// Kills the server with `SIGKILL` (no chance to flush anything) and waits until it is gone.
    /// A no-op if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server with `SIGKILL` (if running) and starts it again on the same data
    /// directory and ports; returns once it is healthy. Panics with the log if it does not
    /// come back.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn();
        if let Err(failure) = self.wait_ready().await {
            panic!("etcd did not come back after a restart: {failure}");
        }
    }

    /// Kills the server with `SIGKILL`, deletes everything it stored, and starts it again,
    /// empty, on the same ports: a store that lost its data. Returns once it is healthy.
    pub async fn wipe(&mut self) {
        self.kill();
        let data = self.data_dir();
        if let Err(e) = std::fs::remove_dir_all(&data) {
            if e.kind() != std::io::ErrorKind::NotFound {
                panic!("cannot remove etcd's data {}: {e}", data.display());
            }
        }
        self.spawn();
        if let Err(failure) = self.wait_ready().await {
            panic!("etcd did not come back after a wipe: {failure}");
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    fn spawn(&mut self) {
        let client = self.client_url();
        let peer = format!("http://{}", SocketAddr::new(self.ip, self.peer_port));
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap_or_else(|e| panic!("cannot open etcd's log file: {e}"));
        let log_err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot open etcd's log file: {e}"));
        let mut command = match &self.host {
            Some(host) => host.command(&self.binary),
            None => Command::new(&self.binary),
        };
        let spawned = command
            .arg("--name")
            .arg(MEMBER_NAME)
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(format!("{MEMBER_NAME}={peer}"))
            .arg("--initial-cluster-state")
            .arg("new")
            // Small and quick to recover; durability is untouched (the WAL is still fsynced).
            .arg("--snapshot-count")
            .arg("1000")
            .arg("--logger")
            .arg("zap")
            .arg("--log-level")
            .arg("warn")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn();
        match spawned {
            Ok(child) => self.child = Some(child),
            Err(e) if e.kind() == io::ErrorKind::NotFound => panic!(
                "the etcd binary `{}` was not found: install it (Debian/Ubuntu: \
                 `apt-get install etcd-server`, which provides /usr/bin/etcd) or set {BINARY_ENV}",
                self.binary
            ),
            Err(e) => panic!("cannot start `{}`: {e}", self.binary),
        }
    }

    /// Polls `GET /health` until it answers healthy, the process exits, or the deadline passes.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("etcd exited with {status}\n{}", self.log_tail()));
                }
            }
            if health(self.client_addr()).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(format!(
                    "etcd is not healthy after {READY_TIMEOUT:?}\n{}",
                    self.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn log_tail(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(self.log_path()) {
            let _ = io::Read::read_to_string(&mut file, &mut text);
        }
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("--- last lines of etcd's log ---\n{tail}")
    }
}

impl Drop for PrivateEtcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot find a free port: {e}"))
}

/// Whether etcd at `addr` answers `GET /health` with `"health":"true"` (within a second).
async fn health(addr: SocketAddr) -> bool {
    let check = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream
            .write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await?;
        Ok::<_, io::Error>(String::from_utf8_lossy(&reply).contains("\"health\":\"true\""))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), check).await,
        Ok(Ok(true))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn starts_restarts_and_stops() {
        let mut etcd = PrivateEtcd::start().await;
        assert!(health(etcd.client_addr()).await);
        etcd.restart().await;
        assert!(health(etcd.client_addr()).await);
        let addr = etcd.client_addr();
        drop(etcd);
        assert!(!health(addr).await, "etcd still answers after drop");
    }
}
