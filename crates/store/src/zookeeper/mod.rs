//! The ZooKeeper authority (cargo feature `zookeeper`): namespaces, their watermarks and parked
//! blocks as znodes of a ZooKeeper ensemble, updated by compare-and-swap on the znode's version, and
//! worker leases whose expiry is a ZooKeeper session's (the coordination the Snowflake and
//! HubSpot designs build on ZooKeeper).
//!
//! Files, one job each: `session` (the authority's session and every call's plumbing:
//! deadlines, reconnection, transient failures and their retries, errors), `record` (the
//! text values of every znode, format v1), `blocks` (the namespaces: the compare-and-swap loop
//! and [`Authority`](crate::Authority)), `leases` ([`WorkerLeases`](crate::lease::WorkerLeases):
//! a session per lease, ephemeral live znodes), `audit` ([`AuditLog`](crate::AuditLog): one
//! sequential znode per entry, created by the `multi` it records).
//!
//! ## Durability and exclusivity
//!
//! ZooKeeper acknowledges a write once a quorum of the ensemble has written it to its
//! transaction log and fsynced the log (`forceSync=yes`, the default; do not turn it off), and
//! the leader has applied it: on `Ok` the new watermark survives a crash of any minority of
//! servers (of the only server, standalone). Two `setData` calls on the same version cannot
//! both succeed, which is what makes blocks disjoint across nodes.
//!
//! ## Lost replies never hand out a block twice
//!
//! A write is never resent: a `setData` or `multi` that fails with a connection loss, an
//! expired session or the operation timeout is [`StoreError::Unavailable`] and drops the
//! namespace's cached state. (Reads, and `ensure_namespace`'s create, whose repetition finds the
//! first one's znode, are sent again after a connection loss, within the operation timeout.)
//! A write (a `multi` with its audit entry) whose reply was lost may have committed, entry and
//! all; every later write is conditional on the version it read, which the lost write changed
//! if it committed, so whichever lands second fails its check and is recomputed from the
//! first: the possibly granted block is burned (and recorded as granted).
//!
//! Calls wait for the session to be connected before they hand the library a request, because
//! the library keeps a request it was given while disconnected and sends it once reconnected,
//! after its caller gave up. A write handed over in the instant the connection died (before the
//! library noticed) can still go out that way, up to 7/5 of the session timeout later (then the
//! library gives the session up and fails it); it is a compare-and-swap like any other, so it
//! lands only if nothing was written since, and its block is then burned.
//!
//! ## What it does not do
//!
//! TLS, SASL or digest authentication and ACLs (znodes are created world-writable), chroot in
//! the connect string (use `root`), deleting namespaces, watches, and paging `list` (one
//! `getChildren`; fine for tens of thousands of namespaces). Reads are not preceded by `sync`.

mod audit;
mod blocks;
mod leases;
mod record;
mod session;

use self::blocks::Slot;
use self::leases::LeaseSession;
use self::session::{failed, timed, Deadline};
pub use crate::config::ZookeeperConfig;
pub use crate::ops::MAX_CONFLICTS;
use crate::StoreError;
use idmint_core::NamespaceName;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use tokio::time::Instant;
use zookeeper_client::{Acls, Client, CreateMode, CreateOptions, Error as ZkError};

const KIND: &str = "zookeeper";

const PERSISTENT: CreateOptions<'static> = CreateMode::Persistent.with_acls(Acls::anyone_all());
const EPHEMERAL: CreateOptions<'static> = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
const SEQUENTIAL: CreateOptions<'static> =
    CreateMode::PersistentSequential.with_acls(Acls::anyone_all());

/// The ZooKeeper authority. Cheap to share behind an `Arc`; holds one ZooKeeper session (whose
/// connection multiplexes concurrent calls) and, per lease it holds, that lease's session's id.
pub struct ZookeeperAuthority {
    config: ZookeeperConfig,
    connect_string: String,
    /// The current session; replaced by the next call once it is expired or closed.
    client: tokio::sync::Mutex<Option<Client>>,
    /// `<root>/namespaces`.
    ns_dir: String,
    /// `<root>/leases`.
    lease_dir: String,
    /// `<root>/audit`.
    audit_dir: String,
    slots: Mutex<HashMap<NamespaceName, Slot>>,
    lease_sessions: Mutex<HashMap<(NamespaceName, u64), LeaseSession>>,
    conflicts: AtomicU64,
}

impl fmt::Debug for ZookeeperAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZookeeperAuthority")
            .field("servers", &self.config.servers)
            .field("root", &self.config.root)
            .field("op_timeout", &self.config.op_timeout)
            .finish_non_exhaustive()
    }
}

impl ZookeeperAuthority {
    /// Connects to the ensemble, opens a session and creates the root znode and its
    /// directories if absent, all within `config.op_timeout`.
    ///
    /// [`StoreError::InvalidSetup`] if no server is configured, a server or the root is
    /// malformed, or a timeout is zero; [`StoreError::Unavailable`] if ZooKeeper does not answer.
    pub async fn connect(config: ZookeeperConfig) -> Result<Self, StoreError> {
        let setup = |message: String| Err(StoreError::InvalidSetup { message });
        if config.servers.is_empty() {
            return setup("no ZooKeeper server configured".to_owned());
        }
        for server in &config.servers {
            if let Err(why) = crate::config::check_server(server) {
                return setup(format!("ZooKeeper server {server:?}: {why}"));
            }
        }
        if let Err(why) = crate::config::check_root(&config.root) {
            return setup(format!("ZooKeeper root {:?}: {why}", config.root));
        }
        if config.op_timeout.is_zero() || config.session_timeout.is_zero() {
            return setup("op_timeout and session_timeout must be above zero".to_owned());
        }
        let authority = ZookeeperAuthority {
            connect_string: config.connect_string(),
            ns_dir: format!("{}/namespaces", config.root),
            lease_dir: format!("{}/leases", config.root),
            audit_dir: format!("{}/audit", config.root),
            config,
            client: tokio::sync::Mutex::new(None),
            slots: Mutex::new(HashMap::new()),
            lease_sessions: Mutex::new(HashMap::new()),
            conflicts: AtomicU64::new(0),
        };
        let deadline = authority.deadline();
        authority.ensure_dirs(deadline).await?;
        Ok(authority)
    }

    /// How many compare-and-swap conflicts (another writer between this authority's read and
    /// its write) were retried since it was created.
    pub fn conflicts_retried(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }

    /// The config it was created with.
    pub fn config(&self) -> &ZookeeperConfig {
        &self.config
    }

    fn deadline(&self) -> Deadline {
        (
            Instant::now() + self.config.op_timeout,
            self.config.op_timeout,
        )
    }

    /// Creates `<root>` (and its parents), `<root>/namespaces`, `<root>/leases` and
    /// `<root>/audit` if absent.
    async fn ensure_dirs(&self, deadline: Deadline) -> Result<(), StoreError> {
        let client = self.client(deadline).await?;
        let root = &self.config.root;
        let mut paths: Vec<String> = Vec::new();
        for (i, _) in root.match_indices('/').skip(1) {
            paths.push(root[..i].to_owned());
        }
        paths.push(root.clone());
        paths.push(self.ns_dir.clone());
        paths.push(self.lease_dir.clone());
        paths.push(self.audit_dir.clone());
        for path in paths {
            match timed(
                deadline,
                "creating the root znodes",
                client.create(&path, b"", &PERSISTENT),
            )
            .await?
            {
                Ok(_) | Err(ZkError::NodeExists) => {}
                Err(e) => return Err(failed(&format!("creating {path}"), &e)),
            }
        }
        Ok(())
    }
}
