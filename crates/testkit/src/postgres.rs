//! Per-test PostgreSQL databases: [`TempDatabase`] creates a fresh, uniquely named database
//! (`idmint_test_<pid>_<nanos>_<n>`) on a running server and drops it (`WITH (FORCE)`, closing
//! whatever connections remain) when dropped, so tests run in parallel without sharing state.
//!
//! The server is `127.0.0.1:5432`, user `postgres`, trust authentication, unless the environment
//! says otherwise: `IDMINT_TEST_POSTGRES_ADDR` (`ip:port`), `IDMINT_TEST_POSTGRES_USER`,
//! `IDMINT_TEST_POSTGRES_PASSWORD`. A test that needs the server panics, saying how to start it,
//! when it is unreachable: it never skips.
//!
//! What it does not do: start or stop the server (it is a system service, shared by all tests),
//! or clean up databases of test processes that were killed (their names carry the pid; drop
//! them by hand with `DROP DATABASE … WITH (FORCE)`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio_postgres::{Client, NoTls};

const ADDR_ENV: &str = "IDMINT_TEST_POSTGRES_ADDR";
const USER_ENV: &str = "IDMINT_TEST_POSTGRES_USER";
const PASSWORD_ENV: &str = "IDMINT_TEST_POSTGRES_PASSWORD";
const DEFAULT_ADDR: &str = "127.0.0.1:5432";
const DEFAULT_USER: &str = "postgres";
/// Database names created here start with this.
pub const PREFIX: &str = "idmint_test_";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A fresh database on the test server, dropped with the value.
#[derive(Debug)]
pub struct TempDatabase {
    name: String,
    server: SocketAddr,
    user: String,
    password: Option<String>,
    dropped: bool,
}

impl TempDatabase {
    /// Creates a new, empty database on the test server.
    ///
    /// Panics with how to start the server if it cannot be reached or refuses to create it.
    pub async fn create() -> TempDatabase {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let raw_addr = std::env::var(ADDR_ENV).unwrap_or_else(|_| DEFAULT_ADDR.to_owned());
        let server: SocketAddr = raw_addr
            .parse()
            .unwrap_or_else(|e| panic!("{ADDR_ENV}={raw_addr:?} is not an ip:port address: {e}"));
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let db = TempDatabase {
            name: format!("{PREFIX}{}_{nanos}_{n}", std::process::id()),
            server,
            user: std::env::var(USER_ENV).unwrap_or_else(|_| DEFAULT_USER.to_owned()),
            password: std::env::var(PASSWORD_ENV).ok(),
            dropped: false,
        };
        let admin = db.admin().await;
        // The name is ours: letters, digits and underscores only.
        if let Err(e) = admin
            .batch_execute(&format!("CREATE DATABASE \"{}\"", db.name))
            .await
        {
            panic!(
                "cannot create test database {} on PostgreSQL at {server}: {}",
                db.name,
                describe(&e)
            );
        }
        db
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's address (give it to a `FaultProxy` as its upstream).
    pub fn server_addr(&self) -> SocketAddr {
        self.server
    }

    /// A connection string (key-value form) for this database on the server itself.
    pub fn url(&self) -> String {
        self.url_via(self.server)
    }

    /// A connection string for this database reached through `addr` (a proxy in front of the
    /// server).
    pub fn url_via(&self, addr: SocketAddr) -> String {
        self.url_for(addr, &self.name)
    }

    /// A connected client on this database (its connection task spawned on the current
    /// runtime). Panics if the server cannot be reached.
    pub async fn client(&self) -> Client {
        connect(&self.url()).await
    }

    /// Drops the database now, waiting for it. Panics if the server refuses.
    pub async fn drop_now(mut self) {
        self.dropped = true;
        let admin = self.admin().await;
        if let Err(e) = admin.batch_execute(&self.drop_sql()).await {
            panic!("cannot drop test database {}: {}", self.name, describe(&e));
        }
    }

    fn url_for(&self, addr: SocketAddr, dbname: &str) -> String {
        let mut url = format!(
            "host={} port={} user={} dbname={dbname} connect_timeout=10",
            addr.ip(),
            addr.port(),
            self.user
        );
        if let Some(password) = &self.password {
            url.push_str(&format!(
                " password='{}'",
                password.replace('\\', "\\\\").replace('\'', "\\'")
            ));
        }
        url
    }

    fn drop_sql(&self) -> String {
        format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name)
    }

    async fn admin(&self) -> Client {
        connect(&self.url_for(self.server, "postgres")).await
    }
}

impl Drop for TempDatabase {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        // Drop runs inside the test's runtime, which cannot be blocked on: use a thread with a
        // runtime of its own, and wait for it so the database is gone when the test ends.
        let admin_url = self.url_for(self.server, "postgres");
        let sql = self.drop_sql();
        let name = self.name.clone();
        let done = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return Err(format!("no runtime: {e}")),
            };
            runtime.block_on(async move {
                let (client, connection) = tokio_postgres::connect(&admin_url, NoTls)
                    .await
                    .map_err(|e| describe(&e))?;
                let task = tokio::spawn(connection);
                let result = client.batch_execute(&sql).await.map_err(|e| describe(&e));
                drop(client);
                let _ = task.await;
                result
            })
        })
        .join();
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("warning: test database {name} was not dropped: {e}"),
            Err(_) => eprintln!("warning: dropping test database {name} panicked"),
        }
    }
}

/// Connects to `url`, spawning the connection task; panics saying how to start the server.
pub async fn connect(url: &str) -> Client {
    let attempt = tokio::time::timeout(CONNECT_TIMEOUT, tokio_postgres::connect(url, NoTls)).await;
    let (client, connection) = match attempt {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => unreachable_server(&describe(&e)),
        Err(_) => unreachable_server(&format!("no answer within {CONNECT_TIMEOUT:?}")),
    };
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

fn unreachable_server(why: &str) -> ! {
    panic!(
        "PostgreSQL is not reachable for the tests ({why}). These tests need a running server on \
         127.0.0.1:5432 with trust authentication for user postgres (or set {ADDR_ENV}, \
         {USER_ENV}, {PASSWORD_ENV}). Start the local one with: \
         pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
    )
}

/// An error with its causes and, for a server error, its message.
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} {}: {}", db.severity(), db.code().code(), db.message());
    }
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}
