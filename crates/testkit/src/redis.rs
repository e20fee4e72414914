//! Private Redis servers for tests: [`PrivateRedis`] runs a real `redis-server` process (Redis 7
//! or Valkey) on a free port of 127.0.0.1, with its own temporary directory, and kills it when
//! dropped.
//!
//! Invariants: by default the server logs every write to its append-only file and fsyncs it
//! before answering (`--appendonly yes --appendfsync always`), takes no RDB snapshots
//! (`--save ""`) and evicts nothing, so a test that kills it with `SIGKILL` and starts it again
//! on the same directory ([`PrivateRedis::restart`]) sees exactly what that setting promises.
//! [`PrivateRedis::start_with`] overrides settings (e.g. `appendfsync everysec`, for a test that
//! the authority refuses it). A server is ready (its log says it accepts connections, with its
//! append-only file loaded) when `start` and `restart` return. The shared Redis on 6379 is
//! never used.
//!
//! [`PrivateRedis::start_tls`] serves TLS only, with a certificate of [`crate::certs::TestCerts`].
//!
//! What it does not do: replicas, Sentinel, Cluster. If `redis-server` is missing it panics with
//! how to install it; it never skips a test.

use crate::certs::TestCerts;
use std::fs::{File, OpenOptions};
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// The binary started; override with the environment variable `IDMINT_TEST_REDIS_BIN`.
const DEFAULT_BINARY: &str = "redis-server";
const BINARY_ENV: &str = "IDMINT_TEST_REDIS_BIN";
/// How long a fresh or restarted server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// What the server logs once it accepts connections (after loading its append-only file).
const READY_LINE: &str = "Ready to accept connections";

/// A running private Redis server; killed (`SIGKILL`) when dropped, its directory removed.
#[derive(Debug)]
pub struct PrivateRedis {
    child: Option<Child>,
    binary: String,
    dir: TempDir,
    port: u16,
    /// Settings passed as `--name value` after the defaults.
    settings: Vec<(String, String)>,
    tls: bool,
}

impl PrivateRedis {
    /// Starts a fresh server (AOF on, fsync on every write) and waits until it is ready.
    ///
    /// Panics, saying how to install it, if `redis-server` is not on `PATH`; panics with the
    /// server's log if it does not become ready within 30 s.
    pub async fn start() -> PrivateRedis {
        PrivateRedis::start_with(&[]).await
    }

    /// [`PrivateRedis::start`] with `settings` (`("appendfsync", "everysec")`, …) after the
    /// defaults.
    pub async fn start_with(settings: &[(&str, &str)]) -> PrivateRedis {
        let settings = settings
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        PrivateRedis::launch(settings, false).await
    }

    /// A server that accepts TLS only, with `certs`' server certificate (clients are not
    /// asked for one).
    pub async fn start_tls(certs: &TestCerts) -> PrivateRedis {
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        let settings = vec![
            ("tls-cert-file".to_owned(), path(certs.cert_file())),
            ("tls-key-file".to_owned(), path(certs.key_file())),
            ("tls-ca-cert-file".to_owned(), path(certs.ca_file())),
            ("tls-auth-clients".to_owned(), "no".to_owned()),
        ];
        PrivateRedis::launch(settings, true).await
    }

    async fn launch(settings: Vec<(String, String)>, tls: bool) -> PrivateRedis {
        let binary = std::env::var(BINARY_ENV).unwrap_or_else(|_| DEFAULT_BINARY.to_owned());
        // A free port may be taken by another process between the probe and the bind, so a
        // server that fails to start is tried again on a new port.
        let mut last_failure = String::new();
        for _ in 0..3 {
            let mut redis = PrivateRedis {
                child: None,
                binary: binary.clone(),
                dir: tempfile::Builder::new()
                    .prefix("idmint-redis-")
                    .tempdir()
                    .unwrap_or_else(|e| panic!("cannot create Redis's directory: {e}")),
                port: free_port(),
                settings: settings.clone(),
                tls,
            };
            redis.spawn();
            match redis.wait_ready(0).await {
                Ok(()) => return redis,
                Err(failure) => last_failure = failure,
            }
        }
        panic!("redis-server did not start: {last_failure}");
    }

    /// `redis://127.0.0.1:PORT` (`rediss://localhost:PORT` for a TLS server: the name its
    /// certificate holds).
    pub fn url(&self) -> String {
        if self.tls {
            format!("rediss://localhost:{}", self.port)
        } else {
            format!("redis://{}", self.addr())
        }
    }

    /// The address (for a [`crate::proxy::FaultProxy`] in front of it).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Kills the server with `SIGKILL` (no chance to flush anything) and waits until it is gone.
    /// A no-op if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server with `SIGKILL` (if running) and starts it again on the same directory
    /// (its append-only file) and port; returns once it is ready. Panics with the log if it
    /// does not come back.
    pub async fn restart(&mut self) {
        self.kill();
        let seen = self.ready_lines();
        self.spawn();
        if let Err(failure) = self.wait_ready(seen).await {
            panic!("redis-server did not come back after a restart: {failure}");
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn spawn(&mut self) {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap_or_else(|e| panic!("cannot open Redis's log file: {e}"));
        let log_err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot open Redis's log file: {e}"));
        let port = self.port.to_string();
        let (plain_port, tls_port) = if self.tls {
            ("0", port.as_str())
        } else {
            (port.as_str(), "0")
        };
        let mut command = Command::new(&self.binary);
        command
            .arg("--port")
            .arg(plain_port)
            .arg("--tls-port")
            .arg(tls_port)
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--appendonly")
            .arg("yes")
            .arg("--appendfsync")
            .arg("always")
            .arg("--save")
            .arg("")
            .arg("--maxmemory-policy")
            .arg("noeviction")
            .arg("--daemonize")
            .arg("no")
            .arg("--protected-mode")
            .arg("no")
            .arg("--loglevel")
            .arg("notice");
        for (name, value) in &self.settings {
            command.arg(format!("--{name}")).arg(value);
        }
        let spawned = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn();
        match spawned {
            Ok(child) => self.child = Some(child),
            Err(e) if e.kind() == io::ErrorKind::NotFound => panic!(
                "the Redis server binary `{}` was not found: install it (Debian/Ubuntu: \
                 `apt-get install redis-server`, which provides /usr/bin/redis-server) or set \
                 {BINARY_ENV}",
                self.binary
            ),
            Err(e) => panic!("cannot start `{}`: {e}", self.binary),
        }
    }

    fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(self.log_path()) {
            let _ = io::Read::read_to_string(&mut file, &mut text);
        }
        text
    }

    fn ready_lines(&self) -> usize {
        self.log().matches(READY_LINE).count()
    }

    /// Polls the log until it says ready more than `seen` times, the process exits, or the
    /// deadline passes.
    async fn wait_ready(&mut self, seen: usize) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!(
                        "redis-server exited with {status}\n{}",
                        self.log_tail()
                    ));
                }
            }
            if self.ready_lines() > seen {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(format!(
                    "redis-server is not ready after {READY_TIMEOUT:?}\n{}",
                    self.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn log_tail(&self) -> String {
        let text = self.log();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("--- last lines of redis-server's log ---\n{tail}")
    }
}

impl Drop for PrivateRedis {
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn ping(addr: SocketAddr) -> bool {
        let check = async {
            let mut stream = tokio::net::TcpStream::connect(addr).await?;
            stream.write_all(b"PING\r\n").await?;
            let mut reply = [0u8; 7];
            stream.read_exact(&mut reply).await?;
            Ok::<_, io::Error>(&reply == b"+PONG\r\n")
        };
        matches!(
            tokio::time::timeout(Duration::from_secs(1), check).await,
            Ok(Ok(true))
        )
    }

    #[tokio::test]
    async fn starts_restarts_and_stops() {
        let mut redis = PrivateRedis::start().await;
        assert_ne!(redis.addr().port(), 6379);
        assert!(ping(redis.addr()).await);
        redis.restart().await;
        assert!(ping(redis.addr()).await);
        let addr = redis.addr();
        drop(redis);
        assert!(!ping(addr).await, "redis-server still answers after drop");
    }
}
