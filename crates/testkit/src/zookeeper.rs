//! Private ZooKeeper servers for tests: [`PrivateZookeeper`] runs a real standalone ZooKeeper
//! (`org.apache.zookeeper.server.ZooKeeperServerMain`, from the jars of the Debian `zookeeper`
//! package) on a free port of 127.0.0.1, with its own temporary data directory and config
//! file, and kills it when dropped.
//!
//! Invariants: the server runs with ZooKeeper's default durability (`forceSync=yes`: the
//! transaction log is fsynced before a write is acknowledged), so a test that kills it with
//! `SIGKILL` ([`PrivateZookeeper::kill9`]) and starts it again ([`PrivateZookeeper::restart`])
//! sees exactly what ZooKeeper promised. Its clock is fast (`tickTime` 100 ms) and it accepts
//! session timeouts from [`MIN_SESSION_TIMEOUT`] to [`MAX_SESSION_TIMEOUT`], so tests can let a
//! session expire in about a second. A [`PrivateZookeeper`] is ready (answers the `ruok`
//! four-letter word with `imok` and serves `srvr`) when [`PrivateZookeeper::start`] and
//! [`PrivateZookeeper::restart`] return.
//!
//! [`PrivateZookeeper::start_in`] runs it in a host of a [`crate::netns::Lab`] instead,
//! listening on that host's address.
//!
//! What it does not do: ensembles of several servers, TLS, SASL or the admin server. If Java or
//! the jars are missing it panics with how to install them; it never skips a test.

use crate::netns::Host;
use std::fs::{File, OpenOptions};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The server's `tickTime`, ms: its unit for session expiry checks.
pub const TICK_MS: u64 = 100;
/// The shortest session timeout the server grants.
pub const MIN_SESSION_TIMEOUT: Duration = Duration::from_millis(1000);
/// The longest session timeout the server grants.
pub const MAX_SESSION_TIMEOUT: Duration = Duration::from_secs(120);
/// Directories searched for the jars; override with `IDMINT_TEST_ZOOKEEPER_CLASSPATH` (a full
/// Java class path).
const JAR_DIRS: [&str; 2] = ["/usr/share/java", "/usr/share/zookeeper"];
const CLASSPATH_ENV: &str = "IDMINT_TEST_ZOOKEEPER_CLASSPATH";
/// The Java binary; override with `IDMINT_TEST_JAVA`.
const JAVA_ENV: &str = "IDMINT_TEST_JAVA";
/// How long a fresh or restarted server (a JVM) may take to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const INSTALL: &str = "install it (Debian/Ubuntu: `apt-get install zookeeper`, which brings \
                       Java and /usr/share/java/zookeeper.jar)";

/// A running private ZooKeeper server; killed (`SIGKILL`) when dropped, its data removed.
#[derive(Debug)]
pub struct PrivateZookeeper {
    child: Option<Child>,
    java: String,
    classpath: String,
    dir: TempDir,
    port: u16,
    /// The address it listens on, and the lab host it runs in (none: this namespace).
    ip: IpAddr,
    host: Option<Host>,
}

impl PrivateZookeeper {
    /// Starts a fresh server on a free port with an empty data directory and waits until it
    /// answers.
    ///
    /// Panics, saying how to install it, if Java or the ZooKeeper jars are missing; panics with
    /// the server's log if it does not answer within 60 s.
    pub async fn start() -> PrivateZookeeper {
        PrivateZookeeper::start_on(None, IpAddr::V4(Ipv4Addr::LOCALHOST)).await
    }

    /// [`PrivateZookeeper::start`] in `host`, listening on `addr` (the host's address on a LAN
    /// of its lab): reachable from the lab's hosts on that LAN only, and cut off with its link.
    pub async fn start_in(host: &Host, addr: Ipv4Addr) -> PrivateZookeeper {
        PrivateZookeeper::start_on(Some(host.clone()), IpAddr::V4(addr)).await
    }

    async fn start_on(host: Option<Host>, ip: IpAddr) -> PrivateZookeeper {
        let java = std::env::var(JAVA_ENV).unwrap_or_else(|_| "java".to_owned());
        let classpath = classpath();
        // A free port is found by binding port 0 and letting go; another process may grab it
        // in between, so a server that fails to start is tried again on a new port.
        let mut last_failure = String::new();
        for _ in 0..3 {
            let mut zk = PrivateZookeeper {
                child: None,
                java: java.clone(),
                classpath: classpath.clone(),
                dir: tempfile::Builder::new()
                    .prefix("idmint-zookeeper-")
                    .tempdir()
                    .unwrap_or_else(|e| panic!("cannot create ZooKeeper's directory: {e}")),
                port: free_port(),
                ip,
                host: host.clone(),
            };
            zk.write_config();
            zk.spawn();
            match zk.wait_ready().await {
                Ok(()) => return zk,
                Err(failure) => last_failure = failure,
            }
        }
        panic!("ZooKeeper did not start: {last_failure}");
    }

    /// The connect string, `127.0.0.1:PORT`.
    pub fn connect_string(&self) -> String {
        self.client_addr().to_string()
    }

    /// The client address (for a [`crate::proxy::FaultProxy`] in front of it).
    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }

    /// Kills the server with `SIGKILL` (no chance to flush anything) and waits until it is gone.
    /// A no-op if it is not running.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server with `SIGKILL` (if running) and starts it again on the same data
    /// directory and port; returns once it answers. Panics with the log if it does not come
    /// back.
    pub async fn restart(&mut self) {
        self.kill9();
        self.spawn();
        if let Err(failure) = self.wait_ready().await {
            panic!("ZooKeeper did not come back after a restart: {failure}");
        }
    }

    /// Kills the server with `SIGKILL`, deletes everything it stored, and starts it again,
    /// empty, on the same port: a store that lost its data (a wiped disk, an empty backup
    /// restored). Returns once it answers.
    pub async fn wipe(&mut self) {
        self.kill9();
        let data = self.dir.path().join("data");
        if let Err(e) = std::fs::remove_dir_all(&data) {
            if e.kind() != io::ErrorKind::NotFound {
                panic!("cannot remove ZooKeeper's data {}: {e}", data.display());
            }
        }
        self.spawn();
        if let Err(failure) = self.wait_ready().await {
            panic!("ZooKeeper did not come back after a wipe: {failure}");
        }
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("zoo.cfg")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("zookeeper.log")
    }

    fn write_config(&self) {
        let data = self.dir.path().join("data");
        let config = format!(
            "tickTime={TICK_MS}\n\
             dataDir={}\n\
             clientPort={}\n\
             clientPortAddress={}\n\
             minSessionTimeout={}\n\
             maxSessionTimeout={}\n\
             maxClientCnxns=0\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=ruok,srvr,stat,cons,mntr\n\
             forceSync=yes\n\
             snapCount=10000\n",
            data.display(),
            self.port,
            self.ip,
            MIN_SESSION_TIMEOUT.as_millis(),
            MAX_SESSION_TIMEOUT.as_millis(),
        );
        std::fs::write(self.config_path(), config)
            .unwrap_or_else(|e| panic!("cannot write ZooKeeper's config: {e}"));
    }

    fn spawn(&mut self) {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap_or_else(|e| panic!("cannot open ZooKeeper's log file: {e}"));
        let log_err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot open ZooKeeper's log file: {e}"));
        let mut command = match &self.host {
            Some(host) => host.command(&self.java),
            None => Command::new(&self.java),
        };
        let spawned = command
            // A small, quick-starting JVM: the machines running the tests are small.
            .arg("-Xmx256m")
            .arg("-XX:+UseSerialGC")
            .arg("-XX:TieredStopAtLevel=1")
            .arg("-Dzookeeper.jmx.log4j.disable=true")
            .arg("-cp")
            .arg(&self.classpath)
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(self.config_path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn();
        match spawned {
            Ok(child) => self.child = Some(child),
            Err(e) if e.kind() == io::ErrorKind::NotFound => panic!(
                "Java (`{}`) was not found, needed to run ZooKeeper: {INSTALL} or set {JAVA_ENV}",
                self.java
            ),
            Err(e) => panic!("cannot start `{}`: {e}", self.java),
        }
    }

    /// Polls `ruok` until it answers `imok` and `srvr` says it serves, the process exits, or
    /// the deadline passes.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!(
                        "ZooKeeper exited with {status}\n{}",
                        self.log_tail()
                    ));
                }
            }
            if ready(self.client_addr()).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill9();
                return Err(format!(
                    "ZooKeeper does not answer after {READY_TIMEOUT:?}\n{}",
                    self.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_tail(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(self.log_path()) {
            let _ = io::Read::read_to_string(&mut file, &mut text);
        }
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("--- last lines of ZooKeeper's log ---\n{tail}")
    }
}

impl Drop for PrivateZookeeper {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The class path of the server: `IDMINT_TEST_ZOOKEEPER_CLASSPATH`, or `zookeeper.jar` (whose
/// manifest names the other jars it needs) and an SLF4J binding, found in [`JAR_DIRS`].
/// Panics, saying how to install them, if the jar is missing.
fn classpath() -> String {
    if let Ok(cp) = std::env::var(CLASSPATH_ENV) {
        return cp;
    }
    let find = |name: &str| -> Option<PathBuf> {
        JAR_DIRS
            .iter()
            .map(|dir| Path::new(dir).join(name))
            .find(|p| p.is_file())
    };
    let Some(server) = find("zookeeper.jar") else {
        panic!(
            "the ZooKeeper server jar (zookeeper.jar) was not found in {}: {INSTALL}, or set \
             {CLASSPATH_ENV} to its class path",
            JAR_DIRS.join(" or ")
        );
    };
    let mut parts = vec![server];
    // Its own dependencies, should the manifest not name them all.
    parts.extend(
        ["zookeeper-jute.jar", "slf4j-api.jar"]
            .iter()
            .filter_map(|j| find(j)),
    );
    // Logs to stderr (the log file) if a simple binding is there, else nowhere.
    if let Some(binding) = find("slf4j-simple.jar").or_else(|| find("slf4j-nop.jar")) {
        parts.push(binding);
    }
    parts
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot find a free port: {e}"))
}

/// Sends a four-letter word and returns the reply (within a second).
async fn four_letter_word(addr: SocketAddr, word: &[u8; 4]) -> Option<String> {
    let ask = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(word).await?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await?;
        Ok::<_, io::Error>(String::from_utf8_lossy(&reply).into_owned())
    };
    match tokio::time::timeout(Duration::from_secs(1), ask).await {
        Ok(Ok(reply)) => Some(reply),
        _ => None,
    }
}

/// Whether ZooKeeper at `addr` is up (`ruok` → `imok`) and serving (`srvr` reports its mode).
async fn ready(addr: SocketAddr) -> bool {
    matches!(four_letter_word(addr, b"ruok").await, Some(r) if r == "imok")
        && matches!(four_letter_word(addr, b"srvr").await, Some(r) if r.contains("Mode: standalone"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn starts_restarts_and_stops() {
        let mut zk = PrivateZookeeper::start().await;
        assert!(ready(zk.client_addr()).await);
        zk.restart().await;
        assert!(ready(zk.client_addr()).await);
        let addr = zk.client_addr();
        drop(zk);
        assert!(!ready(addr).await, "ZooKeeper still answers after drop");
    }
}
