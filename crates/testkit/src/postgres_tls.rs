//! A private PostgreSQL server that accepts TLS connections only: [`PrivatePostgres`] runs
//! `initdb` and `postgres` (PostgreSQL 15+, `/usr/lib/postgresql/*/bin`, or
//! `IDMINT_TEST_PG_BIN`) on a free port of 127.0.0.1, with its own temporary data directory,
//! `ssl = on` and a certificate made at test time ([`crate::certs::TestCerts`]), and kills it
//! when dropped.
//!
//! Invariants: `pg_hba.conf` admits `hostssl` connections only (trust authentication, user
//! `postgres`), and rejects every plain one, so a client that gets in used TLS. When the tests
//! run as root the server runs as the `postgres` user (PostgreSQL refuses root), its directory
//! and key handed to that user. [`PrivatePostgres::start`] returns once the server accepts
//! connections.
//!
//! What it does not do: durability (`fsync = off`: these tests check the channel, not the
//! disk), replication, or client certificates. Missing binaries panic with how to install
//! them; it never skips a test.

use crate::certs::TestCerts;
use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

const BIN_ENV: &str = "IDMINT_TEST_PG_BIN";
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running private PostgreSQL that speaks TLS only; killed when dropped.
#[derive(Debug)]
pub struct PrivatePostgres {
    child: Option<Child>,
    dir: TempDir,
    port: u16,
}

/// The directory of `initdb` and `postgres`.
pub(crate) fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var(BIN_ENV) {
        return PathBuf::from(dir);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
                .filter(|bin| bin.join("initdb").exists())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!(
            "no PostgreSQL server binaries (initdb, postgres) under /usr/lib/postgresql/*/bin: \
             install them with `apt-get install postgresql`, or set {BIN_ENV}"
        )
    })
}

/// The uid and gid of the `postgres` user, when running as root (PostgreSQL refuses root).
pub(crate) fn run_as() -> Option<(u32, u32)> {
    let uid = |args: &[&str]| -> Option<u32> {
        let out = Command::new("id").args(args).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if uid(&["-u"])? != 0 {
        return None;
    }
    match (uid(&["-u", "postgres"]), uid(&["-g", "postgres"])) {
        (Some(u), Some(g)) => Some((u, g)),
        _ => panic!("running as root, and there is no `postgres` user to run PostgreSQL as"),
    }
}

/// `program` run as `user` (uid, gid) when given.
pub(crate) fn command(program: &Path, user: Option<(u32, u32)>) -> Command {
    let mut cmd = Command::new(program);
    if let Some((uid, gid)) = user {
        cmd.uid(uid).gid(gid);
    }
    cmd
}

impl PrivatePostgres {
    /// Starts a fresh server with `certs`' server certificate and key, TLS only, and waits
    /// until it accepts connections.
    ///
    /// # Panics
    /// If the binaries are missing or the server does not start (with its log).
    pub async fn start(certs: &TestCerts) -> PrivatePostgres {
        let bin = bin_dir();
        let user = run_as();
        let mut dir = tempfile::Builder::new()
            .prefix("idmint-pg-tls-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a directory for PostgreSQL: {e}"));
        let data = dir.path().join("data");
        let chown = |path: &Path| {
            if let Some((uid, gid)) = user {
                std::os::unix::fs::chown(path, Some(uid), Some(gid))
                    .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
            }
        };
        chown(dir.path());
        let init = command(&bin.join("initdb"), user)
            .args(["-D"])
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.join("initdb").display()));
        assert!(
            init.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&init.stdout),
            String::from_utf8_lossy(&init.stderr)
        );
        for (from, to) in [
            (certs.cert_file(), "server.pem"),
            (certs.key_file(), "server.key"),
        ] {
            let to = data.join(to);
            std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("copying {to:?}: {e}"));
            chown(&to);
        }
        std::fs::write(
            data.join("pg_hba.conf"),
            "hostssl all all 127.0.0.1/32 trust\nhostnossl all all 0.0.0.0/0 reject\n",
        )
        .unwrap_or_else(|e| panic!("writing pg_hba.conf: {e}"));
        let mut last = String::new();
        for _ in 0..3 {
            let port = free_port();
            let log = File::create(dir.path().join("postgres.log"))
                .unwrap_or_else(|e| panic!("creating postgres.log: {e}"));
            let child = command(&bin.join("postgres"), user)
                .arg("-D")
                .arg(&data)
                .args(["-p", &port.to_string(), "-k"])
                .arg(dir.path())
                .args([
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "ssl=on",
                    "-c",
                    "ssl_cert_file=server.pem",
                    "-c",
                    "ssl_key_file=server.key",
                    "-c",
                    "fsync=off",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.join("postgres").display()));
            let mut pg = PrivatePostgres {
                child: Some(child),
                dir,
                port,
            };
            match pg.wait_ready(&bin, user).await {
                Ok(()) => return pg,
                Err(e) => {
                    last = e;
                    pg.kill();
                    dir = std::mem::replace(
                        &mut pg.dir,
                        tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}")),
                    );
                }
            }
        }
        panic!("the private PostgreSQL did not start: {last}")
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// A connection string (key-value form) for database `postgres` as user `postgres`, on
    /// `host` (`127.0.0.1` or `localhost`: both are in the test certificate).
    pub fn url(&self, host: &str) -> String {
        format!(
            "host={host} port={} user=postgres dbname=postgres connect_timeout=10",
            self.port
        )
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    async fn wait_ready(&mut self, bin: &Path, user: Option<(u32, u32)>) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("postgres exited ({status}): {}", self.log()));
                }
            }
            let ready = command(&bin.join("pg_isready"), user)
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-t", "1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(format!(
                    "not ready within {READY_TIMEOUT:?}: {}",
                    self.log()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot find a free port: {e}"))
}
