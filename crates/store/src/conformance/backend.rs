//! Backend fixtures: what the suite needs from a backend to test it, and one fixture per
//! built-in backend on real storage of the test's own.
//!
//! A [`Backend`] value is one piece of storage that belongs to one test (a fresh PostgreSQL or
//! MySQL database, a private etcd server or key prefix, a temporary directory, a memory
//! authority). [`Backend::open`] opens an authority on it, again and again: a reopen after the
//! previous one was dropped, or, for backends reached over a network, a second node on the same
//! storage at the same time. [`Backend::independent`] gives storage that shares nothing with it
//! (Flickr's second server). A [`NetworkBackend`] can also be reached at an address of the
//! test's choosing (a [`FaultProxy`](idmint_testkit::proxy::FaultProxy) in front of the server)
//! with a short operation timeout, and describes how it behaves under faults
//! ([`FaultProfile`]), so that one fault scenario serves every backend.
//!
//! Invariants: storage is never shared between two fixture values made by [`Backend::create`]
//! (tests run in parallel); it lives exactly as long as the value; a fixture whose server is
//! absent panics saying how to start it, never skips.
//!
//! What it does not do: the multi authority (its members own other residue classes than the
//! namespace's, which the contract properties check; `tests/multi.rs` covers it), servers'
//! crashes (each backend's own tests kill their private servers), or cleaning up storage of a
//! killed test process.

use crate::{Authority, StoreError};
use idmint_core::{NamespaceName, SequenceSpec};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How a backend's `reserve(count)` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grants {
    /// A block of exactly `count` ids (cut only at the namespace's maximum), for any spec.
    Blocks,
    /// One id per call from the server's own counter (Flickr's ticket servers), and only the
    /// server's step and offset: 1 and 0 on the test server.
    Tickets,
}

impl Grants {
    /// The ids a reservation of `count` gets.
    pub fn ids_for(self, count: u64) -> u64 {
        match self {
            Grants::Blocks => count,
            Grants::Tickets => 1,
        }
    }

    /// `preferred` if the backend can serve it, else the nearest spec it can (same width and
    /// first id, the server's step and offset).
    pub fn spec(self, preferred: SequenceSpec) -> SequenceSpec {
        match self {
            Grants::Blocks => preferred,
            Grants::Tickets => SequenceSpec::new(preferred.width(), preferred.first(), 1, 0)
                .unwrap_or_else(|e| panic!("no ticket spec like {preferred:?}: {e}")),
        }
    }
}

/// One test's storage for a backend. See the module docs.
pub trait Backend: Sized + Send + Sync + 'static {
    /// What the backend's [`Authority::kind`] says (and its `Unavailable` errors name).
    const KIND: &'static str;
    /// What a reservation returns.
    const GRANTS: Grants = Grants::Blocks;
    /// Whether [`Backend::open`] may be called again while an earlier authority is open (a
    /// second node on the same storage). Backends reached over a network say `true`.
    const CONCURRENT_OPENS: bool = false;

    /// Fresh storage of the test's own. Panics, saying how to start the server, if it is absent.
    fn create() -> impl Future<Output = Self> + Send;

    /// Storage that shares nothing with `self` (another database, directory or key prefix).
    fn independent(&self) -> impl Future<Output = Self> + Send {
        Self::create()
    }

    /// An authority on this storage, with the backend's default settings. Every call opens a
    /// new one that sees what earlier ones wrote; backends with a network may be opened several
    /// times at once (several nodes), the others only after the previous authority is dropped.
    fn open(&self) -> impl Future<Output = Arc<dyn Authority>> + Send;

    /// Deletes lease group `group`'s records (its group record, worker records and live
    /// leases) and nothing else, as an operator's mistake or a partial restore would: the
    /// store keeps its incarnation and audit ledger. Called with no authority of the storage
    /// open. Panics for a backend that stores no leases.
    fn delete_lease_group(&self, group: &NamespaceName) -> impl Future<Output = ()> + Send {
        let _ = group;
        async { panic!("the {} backend stores no worker leases", Self::KIND) }
    }
}

/// How a networked backend behaves under the faults of the suite. The fields state measured,
/// documented behaviour of each backend; the fault scenarios assert it.
#[derive(Debug, Clone, Copy)]
pub struct FaultProfile {
    /// The operation timeout of the authority behind the proxy.
    pub op_timeout: Duration,
    /// How long past `op_timeout` an operation against a stalled server may take to fail.
    pub timeout_slack: Duration,
    /// What the `Unavailable` message of a timed-out operation says, with the timeout, if the
    /// backend's own timeout is always the one that fires.
    pub timeout_says: Option<&'static str>,
    /// A cut connection fails at once (well within half the timeout), not at the timeout.
    pub cut_fails_fast: bool,
    /// The first call after a cut is lifted succeeds (the authority reconnects within it).
    pub recovers_at_once: bool,
    /// Every request reaches the server in order over one connection, so requests held by a
    /// stall are settled before any later one: after recovery the durable watermark is exactly
    /// the recovered reservation's.
    pub in_order_after_stall: bool,
    /// A request whose reply is lost has always committed (the reply is sent after the
    /// commit). Otherwise the commit is a race the scenario repeats until it has seen it.
    pub lost_reply_commits: bool,
}

/// A backend reached over the network: it can be connected through a proxy.
pub trait NetworkBackend: Backend {
    /// How it behaves under faults.
    const FAULTS: FaultProfile;

    /// The server's address (a proxy's upstream).
    fn server_addr(&self) -> SocketAddr;

    /// An authority on this storage reached at `addr` (a proxy), with `op_timeout` and otherwise
    /// the defaults; the error of the backend's `connect` as is.
    fn connect_via(
        &self,
        addr: SocketAddr,
        op_timeout: Duration,
    ) -> impl Future<Output = Result<Arc<dyn Authority>, StoreError>> + Send;
}

fn connected(kind: &str, result: Result<Arc<dyn Authority>, StoreError>) -> Arc<dyn Authority> {
    result.unwrap_or_else(|e| panic!("connecting the {kind} authority failed: {e}"))
}

/// The in-memory authority: storage is the authority itself, so a reopen returns it again.
#[derive(Debug, Default)]
pub struct MemoryBackend(Arc<crate::MemoryAuthority>);

impl Backend for MemoryBackend {
    const KIND: &'static str = "memory";
    const CONCURRENT_OPENS: bool = true;

    async fn create() -> Self {
        MemoryBackend::default()
    }

    async fn open(&self) -> Arc<dyn Authority> {
        self.0.clone()
    }

    async fn delete_lease_group(&self, group: &NamespaceName) {
        self.0.delete_lease_group_records(group);
    }
}

#[cfg(feature = "file")]
pub use file::FileBackend;

#[cfg(feature = "file")]
mod file {
    use super::*;

    /// The file authority in a temporary directory (removed with the value). One authority at a
    /// time: a second open while one is alive is `Locked`.
    #[derive(Debug)]
    pub struct FileBackend {
        dir: tempfile::TempDir,
    }

    impl Backend for FileBackend {
        const KIND: &'static str = "file";

        async fn create() -> Self {
            let dir = tempfile::Builder::new()
                .prefix("idmint-conformance-")
                .tempdir()
                .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
            FileBackend { dir }
        }

        async fn open(&self) -> Arc<dyn Authority> {
            // Not yet there on the first open: open creates it.
            let path = self.dir.path().join("data");
            let opened = tokio::task::spawn_blocking(move || crate::FileAuthority::open(&path))
                .await
                .unwrap_or_else(|e| panic!("opening the file authority panicked: {e}"));
            connected(
                Self::KIND,
                opened.map(|a| Arc::new(a) as Arc<dyn Authority>),
            )
        }
        async fn delete_lease_group(&self, group: &NamespaceName) {
            let path = self.dir.path().join("data");
            let group = group.clone();
            tokio::task::spawn_blocking(move || {
                crate::FileAuthority::open(&path)?.delete_lease_group_records(&group)
            })
            .await
            .unwrap_or_else(|e| panic!("deleting a lease group panicked: {e}"))
            .unwrap_or_else(|e| panic!("deleting a lease group failed: {e}"));
        }
    }
}

#[cfg(feature = "postgres")]
pub use postgres::PostgresBackend;

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use crate::postgres::{PostgresAuthority, PostgresConfig};
    use idmint_testkit::postgres::TempDatabase;

    /// A PostgreSQL database of the test's own on the test server (127.0.0.1:5432, see
    /// `idmint_testkit::postgres`), dropped with the value.
    #[derive(Debug)]
    pub struct PostgresBackend {
        db: TempDatabase,
    }

    async fn connect(config: PostgresConfig) -> Result<Arc<dyn Authority>, StoreError> {
        Ok(Arc::new(PostgresAuthority::connect(config).await?))
    }

    impl Backend for PostgresBackend {
        const KIND: &'static str = "postgres";
        const CONCURRENT_OPENS: bool = true;

        async fn create() -> Self {
            PostgresBackend {
                db: TempDatabase::create().await,
            }
        }

        async fn open(&self) -> Arc<dyn Authority> {
            connected(
                Self::KIND,
                connect(PostgresConfig::new(self.db.url())).await,
            )
        }
        async fn delete_lease_group(&self, group: &NamespaceName) {
            let table = PostgresConfig::new(self.db.url()).table;
            let client = self.db.client().await;
            for suffix in ["leases", "lease_groups"] {
                client
                    .execute(
                        &format!("DELETE FROM \"{table}_{suffix}\" WHERE grp = $1"),
                        &[&group.as_str()],
                    )
                    .await
                    .unwrap_or_else(|e| panic!("deleting lease group {group}: {e}"));
            }
        }
    }

    impl NetworkBackend for PostgresBackend {
        const FAULTS: FaultProfile = FaultProfile {
            // 2 s: a cut must fail within 1 s, with room for a loaded 2-core machine.
            op_timeout: Duration::from_secs(2),
            timeout_slack: Duration::from_millis(1500),
            timeout_says: Some("no answer within"),
            cut_fails_fast: true,
            // A pooled connection that the cut closed is found dead on the next call, which
            // fails; the call after it gets a new connection.
            recovers_at_once: false,
            // A timed-out connection is discarded; its held request may run after later ones.
            in_order_after_stall: false,
            lost_reply_commits: true,
        };

        fn server_addr(&self) -> SocketAddr {
            self.db.server_addr()
        }

        async fn connect_via(
            &self,
            addr: SocketAddr,
            op_timeout: Duration,
        ) -> Result<Arc<dyn Authority>, StoreError> {
            connect(PostgresConfig {
                op_timeout,
                pool_size: 2,
                ..PostgresConfig::new(self.db.url_via(addr))
            })
            .await
        }
    }
}

#[cfg(feature = "mysql")]
pub use mysql::{MysqlBackend, MysqlTicketBackend};

#[cfg(feature = "mysql")]
mod mysql {
    use super::*;
    use crate::mysql::{MysqlAuthority, MysqlConfig, MysqlTicketAuthority};
    use idmint_testkit::mysql::TempDatabase;

    /// A database of the test's own on the MySQL/MariaDB test server (127.0.0.1:3306, root
    /// without password; see `idmint_testkit::mysql`), dropped with the value.
    async fn database() -> TempDatabase {
        // The test kit runs the command-line client: blocking.
        tokio::task::spawn_blocking(TempDatabase::new)
            .await
            .unwrap_or_else(|e| panic!("creating a MySQL test database panicked: {e}"))
    }

    fn config(url: String, op_timeout: Duration) -> MysqlConfig {
        MysqlConfig {
            op_timeout,
            ..MysqlConfig::new(url)
        }
    }

    /// How both modes behave under faults (one statement per reservation, one pool).
    const FAULTS: FaultProfile = FaultProfile {
        op_timeout: Duration::from_secs(2),
        timeout_slack: Duration::from_secs(1),
        timeout_says: Some("no answer within"),
        cut_fails_fast: true,
        recovers_at_once: true,
        in_order_after_stall: false,
        lost_reply_commits: true,
    };

    /// Deletes a lease group's rows from the database's lease tables (the default table's).
    fn delete_mysql_lease_group(db: &TempDatabase, group: &NamespaceName) {
        let table = MysqlConfig::new(db.url()).table;
        for suffix in ["leases", "lease_groups"] {
            db.sql(&format!(
                "DELETE FROM `{table}_{suffix}` WHERE grp = '{}'",
                group.as_str()
            ))
            .unwrap_or_else(|e| panic!("deleting lease group {group}: {e}"));
        }
    }

    /// MySQL block mode ([`MysqlAuthority`]) on a database of the test's own.
    #[derive(Debug)]
    pub struct MysqlBackend {
        db: TempDatabase,
    }

    impl Backend for MysqlBackend {
        const KIND: &'static str = "mysql";
        const CONCURRENT_OPENS: bool = true;

        async fn create() -> Self {
            MysqlBackend {
                db: database().await,
            }
        }

        async fn open(&self) -> Arc<dyn Authority> {
            let a = MysqlAuthority::connect(MysqlConfig::new(self.db.url())).await;
            connected(Self::KIND, a.map(|a| Arc::new(a) as Arc<dyn Authority>))
        }
        async fn delete_lease_group(&self, group: &NamespaceName) {
            delete_mysql_lease_group(&self.db, group);
        }
    }

    impl NetworkBackend for MysqlBackend {
        const FAULTS: FaultProfile = FAULTS;

        fn server_addr(&self) -> SocketAddr {
            self.db.socket_addr()
        }

        async fn connect_via(
            &self,
            addr: SocketAddr,
            op_timeout: Duration,
        ) -> Result<Arc<dyn Authority>, StoreError> {
            let url = self.db.url_via_addr(addr);
            Ok(Arc::new(
                MysqlAuthority::connect(config(url, op_timeout)).await?,
            ))
        }
    }

    /// MySQL ticket mode ([`MysqlTicketAuthority`], Flickr's `REPLACE INTO`) on a database of
    /// the test's own on the test server (increment 1: step 1, offset 0 only).
    #[derive(Debug)]
    pub struct MysqlTicketBackend {
        db: TempDatabase,
    }

    impl Backend for MysqlTicketBackend {
        const KIND: &'static str = "mysql";
        const CONCURRENT_OPENS: bool = true;
        const GRANTS: Grants = Grants::Tickets;

        async fn create() -> Self {
            MysqlTicketBackend {
                db: database().await,
            }
        }

        async fn open(&self) -> Arc<dyn Authority> {
            let a = MysqlTicketAuthority::connect(MysqlConfig::new(self.db.url())).await;
            connected(Self::KIND, a.map(|a| Arc::new(a) as Arc<dyn Authority>))
        }
        async fn delete_lease_group(&self, group: &NamespaceName) {
            delete_mysql_lease_group(&self.db, group);
        }
    }

    impl NetworkBackend for MysqlTicketBackend {
        const FAULTS: FaultProfile = FAULTS;

        fn server_addr(&self) -> SocketAddr {
            self.db.socket_addr()
        }

        async fn connect_via(
            &self,
            addr: SocketAddr,
            op_timeout: Duration,
        ) -> Result<Arc<dyn Authority>, StoreError> {
            let url = self.db.url_via_addr(addr);
            Ok(Arc::new(
                MysqlTicketAuthority::connect(config(url, op_timeout)).await?,
            ))
        }
    }
}

#[cfg(feature = "etcd")]
pub use etcd::EtcdBackend;

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use crate::etcd::{EtcdAuthority, EtcdConfig};
    use idmint_testkit::etcd::PrivateEtcd;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A key prefix of the test's own on a private etcd server (`idmint_testkit::etcd`); the
    /// server is killed when the last prefix on it is dropped. Independent storage is another
    /// prefix on the same server.
    #[derive(Debug)]
    pub struct EtcdBackend {
        server: Arc<PrivateEtcd>,
        prefix: String,
    }

    impl EtcdBackend {
        fn config(&self, endpoint: String) -> EtcdConfig {
            EtcdConfig {
                prefix: self.prefix.clone(),
                ..EtcdConfig::new([endpoint])
            }
        }
    }

    fn new_prefix() -> String {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        format!("/idmint-{}/", COUNTER.fetch_add(1, Ordering::Relaxed))
    }

    async fn connect(config: EtcdConfig) -> Result<Arc<dyn Authority>, StoreError> {
        Ok(Arc::new(EtcdAuthority::connect(config).await?))
    }

    impl Backend for EtcdBackend {
        const KIND: &'static str = "etcd";
        const CONCURRENT_OPENS: bool = true;

        async fn create() -> Self {
            EtcdBackend {
                server: Arc::new(PrivateEtcd::start().await),
                prefix: new_prefix(),
            }
        }

        async fn independent(&self) -> Self {
            EtcdBackend {
                server: self.server.clone(),
                prefix: new_prefix(),
            }
        }

        async fn open(&self) -> Arc<dyn Authority> {
            let config = self.config(self.server.client_url());
            connected(Self::KIND, connect(config).await)
        }
        async fn delete_lease_group(&self, group: &NamespaceName) {
            let config = self.config(self.server.client_url());
            let a = EtcdAuthority::connect(config)
                .await
                .unwrap_or_else(|e| panic!("connecting the etcd authority failed: {e}"));
            a.delete_lease_group_records(group)
                .await
                .unwrap_or_else(|e| panic!("deleting lease group {group}: {e}"));
        }
    }

    impl NetworkBackend for EtcdBackend {
        const FAULTS: FaultProfile = FaultProfile {
            op_timeout: Duration::from_secs(1),
            timeout_slack: Duration::from_millis(500),
            // The gRPC channel's deadline (the same timeout) may fire first, with its own
            // message ("Timeout expired").
            timeout_says: None,
            // The gRPC channel reconnects in the background: calls wait for it, up to the
            // timeout.
            cut_fails_fast: false,
            recovers_at_once: false,
            in_order_after_stall: true,
            // etcd abandons a request whose connection is gone before it is proposed.
            lost_reply_commits: false,
        };

        fn server_addr(&self) -> SocketAddr {
            self.server.client_addr()
        }

        async fn connect_via(
            &self,
            addr: SocketAddr,
            op_timeout: Duration,
        ) -> Result<Arc<dyn Authority>, StoreError> {
            connect(EtcdConfig {
                op_timeout,
                ..self.config(format!("http://{addr}"))
            })
            .await
        }
    }
}

#[cfg(feature = "zookeeper")]
pub use zookeeper::ZookeeperBackend;

#[cfg(feature = "zookeeper")]
mod zookeeper {
    use super::*;
    use crate::zookeeper::{ZookeeperAuthority, ZookeeperConfig};
    use idmint_testkit::zookeeper::PrivateZookeeper;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Weak;

    /// A root znode of the test's own on a private ZooKeeper server
    /// (`idmint_testkit::zookeeper`) shared by the fixtures alive at the same time in one test
    /// process (one JVM instead of one per test; it is killed when the last fixture on it is
    /// dropped, and the next fixture starts a new one). Independent storage is another root on
    /// the same server.
    #[derive(Debug)]
    pub struct ZookeeperBackend {
        server: Arc<PrivateZookeeper>,
        root: String,
    }

    /// The server the live fixtures share.
    static SHARED: tokio::sync::Mutex<Weak<PrivateZookeeper>> =
        tokio::sync::Mutex::const_new(Weak::new());

    async fn shared_server() -> Arc<PrivateZookeeper> {
        let mut shared = SHARED.lock().await;
        if let Some(server) = shared.upgrade() {
            return server;
        }
        let server = Arc::new(PrivateZookeeper::start().await);
        *shared = Arc::downgrade(&server);
        server
    }

    fn new_root() -> String {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        format!(
            "/idmint-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        )
    }

    impl ZookeeperBackend {
        fn config(&self, server: String) -> ZookeeperConfig {
            ZookeeperConfig {
                root: self.root.clone(),
                ..ZookeeperConfig::new([server])
            }
        }
    }

    async fn connect(config: ZookeeperConfig) -> Result<Arc<dyn Authority>, StoreError> {
        Ok(Arc::new(ZookeeperAuthority::connect(config).await?))
    }

    impl Backend for ZookeeperBackend {
        const KIND: &'static str = "zookeeper";
        const CONCURRENT_OPENS: bool = true;

        async fn create() -> Self {
            ZookeeperBackend {
                server: shared_server().await,
                root: new_root(),
            }
        }

        async fn independent(&self) -> Self {
            ZookeeperBackend {
                server: self.server.clone(),
                root: new_root(),
            }
        }

        async fn open(&self) -> Arc<dyn Authority> {
            let config = self.config(self.server.connect_string());
            connected(Self::KIND, connect(config).await)
        }
        async fn delete_lease_group(&self, group: &NamespaceName) {
            let config = self.config(self.server.connect_string());
            let a = ZookeeperAuthority::connect(config)
                .await
                .unwrap_or_else(|e| panic!("connecting the zookeeper authority failed: {e}"));
            a.delete_lease_group_records(group)
                .await
                .unwrap_or_else(|e| panic!("deleting lease group {group}: {e}"));
        }
    }

    impl NetworkBackend for ZookeeperBackend {
        const FAULTS: FaultProfile = FaultProfile {
            op_timeout: Duration::from_secs(1),
            timeout_slack: Duration::from_secs(1),
            timeout_says: Some("no answer within"),
            // Calls wait (up to the timeout) for the library to reconnect rather than queue
            // requests in it.
            cut_fails_fast: false,
            // The library reconnects in the background, with pauses between attempts.
            recovers_at_once: false,
            // Every write is a compare-and-swap on the znode's version: a stalled write that
            // lands late fails its check or is read before the next write.
            in_order_after_stall: true,
            // ZooKeeper answers a write after it committed it.
            lost_reply_commits: true,
        };

        fn server_addr(&self) -> SocketAddr {
            self.server.client_addr()
        }

        /// With a 2 s session: a write handed to the client library just as the proxy cut the
        /// connection stays queued in the session (the library sends it once it reconnects);
        /// the library gives the session up after 7/5 of its timeout without a connection,
        /// failing what is queued, so with a session shorter than the cut scenario's cut
        /// (about 4 × 1 s) nothing sent during the cut reaches the server after it. With the
        /// default 10 s session, an outage shorter than 14 s may let such a write land after
        /// it: still a compare-and-swap on the version read, so its block is burned, never
        /// handed out twice (docs/backends.md).
        async fn connect_via(
            &self,
            addr: SocketAddr,
            op_timeout: Duration,
        ) -> Result<Arc<dyn Authority>, StoreError> {
            connect(ZookeeperConfig {
                op_timeout,
                session_timeout: Duration::from_secs(2),
                ..self.config(addr.to_string())
            })
            .await
        }
    }
}

#[cfg(feature = "redis")]
pub use redis::RedisBackend;

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use crate::redis::{RedisAuthority, RedisConfig};
    use idmint_testkit::redis::PrivateRedis;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A key prefix of the test's own on a private `redis-server` (`idmint_testkit::redis`,
    /// append-only file fsynced on every write); the server is killed when the last prefix on
    /// it is dropped. Independent storage is another prefix on the same server.
    #[derive(Debug)]
    pub struct RedisBackend {
        server: Arc<PrivateRedis>,
        prefix: String,
    }

    impl RedisBackend {
        fn config(&self, url: String) -> RedisConfig {
            RedisConfig {
                prefix: self.prefix.clone(),
                ..RedisConfig::new(url)
            }
        }
    }

    fn new_prefix() -> String {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        format!("idmint-{}", COUNTER.fetch_add(1, Ordering::Relaxed))
    }

    async fn connect(config: RedisConfig) -> Result<Arc<dyn Authority>, StoreError> {
        Ok(Arc::new(RedisAuthority::connect(config).await?))
    }

    impl Backend for RedisBackend {
        const KIND: &'static str = "redis";
        const CONCURRENT_OPENS: bool = true;

        async fn create() -> Self {
            RedisBackend {
                server: Arc::new(PrivateRedis::start().await),
                prefix: new_prefix(),
            }
        }

        async fn independent(&self) -> Self {
            RedisBackend {
                server: self.server.clone(),
                prefix: new_prefix(),
            }
        }

        async fn open(&self) -> Arc<dyn Authority> {
            connected(Self::KIND, connect(self.config(self.server.url())).await)
        }
        async fn delete_lease_group(&self, group: &NamespaceName) {
            let a = RedisAuthority::connect(self.config(self.server.url()))
                .await
                .unwrap_or_else(|e| panic!("connecting the redis authority failed: {e}"));
            a.delete_lease_group_records(group)
                .await
                .unwrap_or_else(|e| panic!("deleting lease group {group}: {e}"));
        }
    }

    impl NetworkBackend for RedisBackend {
        const FAULTS: FaultProfile = FaultProfile {
            op_timeout: Duration::from_secs(1),
            timeout_slack: Duration::from_millis(500),
            timeout_says: Some("no answer within"),
            // A closed connection fails the calls on it at once, and so does connecting
            // through a proxy that closes every new connection.
            cut_fails_fast: true,
            // A call that failed on the connection dropped it: the next one opens a new one.
            recovers_at_once: true,
            // A timed-out connection is dropped; what it held may reach the server after later
            // requests on a new connection (every write compares the watermark it read).
            in_order_after_stall: false,
            // Redis runs a script before it sends the reply.
            lost_reply_commits: true,
        };

        fn server_addr(&self) -> SocketAddr {
            self.server.addr()
        }

        async fn connect_via(
            &self,
            addr: SocketAddr,
            op_timeout: Duration,
        ) -> Result<Arc<dyn Authority>, StoreError> {
            connect(RedisConfig {
                op_timeout,
                ..self.config(format!("redis://{addr}"))
            })
            .await
        }
    }
}
