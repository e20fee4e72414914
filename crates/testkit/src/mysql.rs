//! MySQL/MariaDB servers for tests: a throw-away database on the system server
//! ([`TempDatabase`]) and private `mariadbd` processes ([`PrivateMariadb`]) that a test may
//! configure (Flickr's `auto-increment-increment` / `auto-increment-offset`) and kill.
//!
//! Both talk to the server with the `mariadb` (or `mysql`) command-line client, so the test kit
//! needs no MySQL driver. Everything here blocks (runs processes and waits for them): call it
//! before the code under test starts, or from `tokio::task::spawn_blocking`.
//!
//! Invariants:
//! - a [`TempDatabase`] has a name no other one has (`idmint_test_<pid>_<nanos>_<n>`), so tests
//!   run in parallel on one server, and it is dropped (best effort) when the value is;
//! - a [`PrivateMariadb`] listens on 127.0.0.1 only, keeps its data in a temporary directory
//!   removed on drop, and its process is killed (SIGKILL, no clean shutdown) on drop or on
//!   [`PrivateMariadb::kill`].
//!
//! A missing server or missing binaries are a panic that says how to fix it, never a skipped test.
//!
//! Environment (all optional): `IDMINT_TEST_MYSQL_HOST` / `IDMINT_TEST_MYSQL_PORT` (the system
//! server, default 127.0.0.1:3306, user root without password), `IDMINT_MARIADBD` and
//! `IDMINT_MARIADB_INSTALL_DB` (paths of the server and installer binaries).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const START_SERVER_HINT: &str = "start it with `start-stop-daemon --start --oknodo --background \
     --exec /usr/sbin/mariadbd` (MariaDB, root without password, on 127.0.0.1:3306), or point \
     IDMINT_TEST_MYSQL_HOST / IDMINT_TEST_MYSQL_PORT at another one";

/// How long a private server may take to answer after it was started.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// A database of its own for one test on a running server, dropped with the value.
#[derive(Debug)]
pub struct TempDatabase {
    host: String,
    port: u16,
    name: String,
}

impl TempDatabase {
    /// A new database on the system server (`IDMINT_TEST_MYSQL_HOST`:`IDMINT_TEST_MYSQL_PORT`,
    /// default 127.0.0.1:3306, user root without password).
    ///
    /// Panics with instructions if the server does not answer.
    pub fn new() -> TempDatabase {
        let host = std::env::var("IDMINT_TEST_MYSQL_HOST").unwrap_or_else(|_| "127.0.0.1".into());
        let port = match std::env::var("IDMINT_TEST_MYSQL_PORT") {
            Ok(p) => p
                .parse()
                .unwrap_or_else(|_| panic!("IDMINT_TEST_MYSQL_PORT={p:?} is not a port")),
            Err(_) => 3306,
        };
        TempDatabase::create(host, port, START_SERVER_HINT)
    }

    /// A new database on a private server.
    pub fn on(server: &PrivateMariadb) -> TempDatabase {
        TempDatabase::create(
            "127.0.0.1".into(),
            server.port(),
            "the private server stopped (was it killed?)",
        )
    }

    fn create(host: String, port: u16, hint: &str) -> TempDatabase {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "idmint_test_{}_{nanos}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        if let Err(e) = run_sql(&host, port, &format!("CREATE DATABASE `{name}`")) {
            panic!(
                "cannot create test database {name} on MySQL/MariaDB at {host}:{port}: {e}; {hint}"
            );
        }
        TempDatabase { host, port, name }
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's address.
    pub fn host_port(&self) -> (&str, u16) {
        (&self.host, self.port)
    }

    /// `mysql://root@HOST:PORT/NAME`.
    pub fn url(&self) -> String {
        self.url_via(&self.host, self.port)
    }

    /// The database's URL through another address (a proxy in front of the server).
    pub fn url_via(&self, host: &str, port: u16) -> String {
        format!("mysql://root@{host}:{port}/{}", self.name)
    }

    /// The URL through `addr` (a [`crate::proxy::FaultProxy`]).
    pub fn url_via_addr(&self, addr: SocketAddr) -> String {
        self.url_via(&addr.ip().to_string(), addr.port())
    }

    /// The server's address as a socket address (to put a proxy in front of it).
    pub fn socket_addr(&self) -> SocketAddr {
        let host = if self.host == "localhost" {
            "127.0.0.1"
        } else {
            &self.host
        };
        format!("{host}:{}", self.port)
            .parse()
            .unwrap_or_else(|e| panic!("{host}:{} is not a socket address: {e}", self.port))
    }

    /// Runs `sql` in the database with the command-line client; the output (tab-separated,
    /// without column names) or the client's error.
    pub fn sql(&self, sql: &str) -> Result<String, String> {
        run_sql(
            &self.host,
            self.port,
            &format!("USE `{}`; {sql}", self.name),
        )
    }
}

impl Default for TempDatabase {
    fn default() -> Self {
        TempDatabase::new()
    }
}

impl Drop for TempDatabase {
    fn drop(&mut self) {
        // Best effort: a killed private server takes its databases with it.
        let _ = run_sql(
            &self.host,
            self.port,
            &format!("DROP DATABASE IF EXISTS `{}`", self.name),
        );
    }
}

/// A `mariadbd` of its own, on a free port of 127.0.0.1, with a temporary data directory, root
/// without password, and the given `auto-increment-increment` / `auto-increment-offset` (MySQL's
/// numbering: offsets 1..=increment). Killed on drop.
#[derive(Debug)]
pub struct PrivateMariadb {
    child: Option<Child>,
    port: u16,
    increment: u32,
    offset: u32,
    /// Further server options, given again on restart.
    options: Vec<String>,
    dir: tempfile::TempDir,
}

impl PrivateMariadb {
    /// Starts a server with `auto-increment-increment = increment` and
    /// `auto-increment-offset = offset` and waits (up to a minute) until it answers.
    ///
    /// The system tables are installed once per process into a template directory, then copied:
    /// the first server takes a few seconds, later ones well under one. Panics with the server's
    /// error log if it does not start.
    pub fn start(increment: u32, offset: u32) -> PrivateMariadb {
        Self::start_with(increment, offset, &[])
    }

    /// [`PrivateMariadb::start`] with further `mariadbd` options, e.g.
    /// `--innodb-flush-log-at-trx-commit=2` or `--log-bin` (they come after the kit's own, so
    /// they override them), kept for [`PrivateMariadb::restart`].
    pub fn start_with(increment: u32, offset: u32, options: &[&str]) -> PrivateMariadb {
        let options: Vec<String> = options.iter().map(|o| (*o).to_owned()).collect();
        let template = template_dir();
        let dir = tempfile::Builder::new()
            .prefix("idmint-mariadb-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let data = dir.path().join("data");
        copy_dir(template, &data)
            .unwrap_or_else(|e| panic!("cannot copy the MariaDB template data directory: {e}"));
        // Several tests may start servers at once: retry if another process took the port.
        let mut last_error = String::new();
        for _ in 0..3 {
            let port = free_port();
            let mut child = spawn_mariadbd(dir.path(), &data, port, increment, offset, &options);
            match wait_until_ready(&mut child, port, dir.path()) {
                Ok(()) => {
                    return PrivateMariadb {
                        child: Some(child),
                        port,
                        increment,
                        offset,
                        options,
                        dir,
                    }
                }
                Err(e) => {
                    last_error = e;
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
        panic!("private MariaDB did not start: {last_error}");
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The address, to put a proxy in front of it.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The temporary directory holding the data directory (`data/`) and the error log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills the server at once (SIGKILL: a crash, not a shutdown) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again (after [`PrivateMariadb::kill`]) on the same port and data, and
    /// waits until it answers: InnoDB recovers what was committed before the kill.
    pub fn restart(&mut self) {
        self.kill();
        let data = self.dir.path().join("data");
        let mut child = spawn_mariadbd(
            self.dir.path(),
            &data,
            self.port,
            self.increment,
            self.offset,
            &self.options,
        );
        if let Err(e) = wait_until_ready(&mut child, self.port, self.dir.path()) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("private MariaDB did not restart: {e}");
        }
        self.child = Some(child);
    }

    /// Runs `sql` on the server with the command-line client.
    pub fn sql(&self, sql: &str) -> Result<String, String> {
        run_sql("127.0.0.1", self.port, sql)
    }
}

impl Drop for PrivateMariadb {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn_mariadbd(
    dir: &Path,
    data: &Path,
    port: u16,
    increment: u32,
    offset: u32,
    options: &[String],
) -> Child {
    let mut cmd = Command::new(mariadbd());
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--port={port}"))
        .arg(format!("--socket={}", dir.join("mysqld.sock").display()))
        .arg(format!("--pid-file={}", dir.join("mysqld.pid").display()))
        .arg(format!("--log-error={}", dir.join("error.log").display()))
        .arg("--bind-address=127.0.0.1")
        .arg("--skip-name-resolve")
        .arg("--skip-log-bin")
        .arg(format!("--auto-increment-increment={increment}"))
        .arg(format!("--auto-increment-offset={offset}"))
        .args(SMALL_INNODB)
        .args(options)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if running_as_root() {
        // mariadbd refuses to run as root unless told so explicitly.
        cmd.arg("--user=root");
    }
    cmd.spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", mariadbd().display()))
}

/// Polls the server until it answers a query, it exits, or the deadline passes.
fn wait_until_ready(child: &mut Child, port: u16, dir: &Path) -> Result<(), String> {
    let deadline = Instant::now() + START_DEADLINE;
    let log_tail = || {
        let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "mariadbd exited with {status}; its log:\n{}",
                log_tail()
            ));
        }
        if run_sql("127.0.0.1", port, "SELECT 1").is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "mariadbd did not answer on port {port} within {START_DEADLINE:?}; its log:\n{}",
                log_tail()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Small InnoDB files and buffers: a test server starts in well under a second.
const SMALL_INNODB: &[&str] = &[
    "--innodb-log-file-size=4M",
    "--innodb-buffer-pool-size=8M",
    "--innodb-data-file-path=ibdata1:4M:autoextend",
    "--max-connections=200",
];

/// The system tables of a fresh server, installed once per machine (per user and server binary)
/// into `$TMPDIR/idmint-mariadb-template-<key>` and reused by later runs; each private server
/// gets a copy.
fn template_dir() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let server = mariadbd();
        // A new server binary gets a new template.
        let key = std::fs::metadata(&server)
            .ok()
            .and_then(|m| {
                let mtime = m
                    .modified()
                    .ok()?
                    .duration_since(std::time::UNIX_EPOCH)
                    .ok()?;
                Some(format!("{}-{}", m.len(), mtime.as_secs()))
            })
            .unwrap_or_else(|| "unknown".into());
        let user = if running_as_root() { "root" } else { "user" };
        let template = std::env::temp_dir().join(format!("idmint-mariadb-template-{user}-{key}"));
        if template.join("mysql").is_dir() {
            return template;
        }
        // Install into a directory of our own, then rename it into place: concurrent test
        // processes each install, one rename wins, the others use the winner's.
        let staging = tempfile::Builder::new()
            .prefix("idmint-mariadb-staging-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let data = staging.path().join("data");
        let installer = install_db();
        let mut cmd = Command::new(&installer);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .args(SMALL_INNODB)
            .stdin(Stdio::null());
        if running_as_root() {
            cmd.arg("--user=root");
        }
        let out = cmd.output().unwrap_or_else(|e| {
            panic!(
                "cannot run {} (install MariaDB: apt-get install mariadb-server): {e}",
                installer.display()
            )
        });
        if !out.status.success() {
            panic!(
                "{} failed: {}\n{}\n{}",
                installer.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        if std::fs::rename(&data, &template).is_err() && !template.join("mysql").is_dir() {
            panic!(
                "cannot move the MariaDB template into {}",
                template.display()
            );
        }
        template
    })
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

fn first_existing(env: &str, candidates: &[&str]) -> PathBuf {
    if let Some(path) = std::env::var_os(env) {
        return PathBuf::from(path);
    }
    for c in candidates {
        if c.contains('/') {
            if Path::new(c).exists() {
                return PathBuf::from(c);
            }
        } else if let Some(paths) = std::env::var_os("PATH") {
            for dir in std::env::split_paths(&paths) {
                if dir.join(c).exists() {
                    return dir.join(c);
                }
            }
        }
    }
    panic!(
        "none of {candidates:?} found (install MariaDB: apt-get install mariadb-server, or set {env})"
    );
}

fn mariadbd() -> PathBuf {
    first_existing(
        "IDMINT_MARIADBD",
        &[
            "mariadbd",
            "/usr/sbin/mariadbd",
            "/usr/local/sbin/mariadbd",
            "mysqld",
            "/usr/sbin/mysqld",
        ],
    )
}

fn install_db() -> PathBuf {
    first_existing(
        "IDMINT_MARIADB_INSTALL_DB",
        &[
            "mariadb-install-db",
            "/usr/bin/mariadb-install-db",
            "mysql_install_db",
            "/usr/bin/mysql_install_db",
        ],
    )
}

fn client() -> PathBuf {
    first_existing("IDMINT_MARIADB_CLIENT", &["mariadb", "mysql"])
}

/// Whether the effective user is root (Linux: `/proc/self/status`); elsewhere assume not.
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            // Uid: real effective saved fs
            line.split_whitespace().nth(2).map(|euid| euid == "0")
        })
        .unwrap_or(false)
}

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot find a free port: {e}"))
}

/// Runs `sql` as root over TCP with the command-line client (batch mode, no column names).
fn run_sql(host: &str, port: u16, sql: &str) -> Result<String, String> {
    let out = Command::new(client())
        .arg("--no-defaults")
        .arg("--protocol=TCP")
        .arg(format!("--host={host}"))
        .arg(format!("--port={port}"))
        .arg("--user=root")
        .arg("--connect-timeout=5")
        .arg("--batch")
        .arg("--skip-column-names")
        .arg("--execute")
        .arg(sql)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run the mariadb client: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}
