//! The Redis authority (cargo feature `redis`): namespaces, their watermarks and parked blocks,
//! worker leases and the audit ledger in one Redis 7 (or Valkey) server, every write one Lua
//! script.
//!
//! Files, one job each: `conn` (the one multiplexed connection, bounded calls, error
//! messages, the server checks made at connect), `scripts` (the Lua text of every script),
//! `keys` (the key names), `record` (decoding what the scripts and reads return, validated),
//! `blocks` (the namespaces and their parks: compare-and-advance, compare-and-set of the
//! parks with the record, and [`Authority`](crate::Authority)),
//! `leases` ([`WorkerLeases`](crate::lease::WorkerLeases): `SET NX PX` live keys beside a
//! durable worker record), `audit` ([`AuditLog`](crate::AuditLog): one stream per subject,
//! appended by the script that makes the grant).
//!
//! ## Durability and exclusivity
//!
//! A Lua script runs alone on the server (nothing interleaves with it), and Redis writes its
//! effects to the append-only file as one `MULTI`/`EXEC` block, so a watermark and its audit
//! entry are written together or not at all, also across a crash (a torn block at the end of
//! the file is dropped on load). With `appendonly yes` and `appendfsync always` Redis fsyncs the
//! file before it answers, so on `Ok` a reservation survives a crash of the server, kill -9
//! included. [`RedisAuthority::connect`] reads both settings and refuses a server without them
//! (and one that evicts keys: `maxmemory-policy` not `noeviction` could drop a watermark or a
//! live lease) unless [`RedisConfig::accept_unsafe_durability`]. Replicas are asynchronous:
//! [`RedisConfig::wait_replicas`] adds a `WAIT` after each write; docs/backends.md says what a
//! Sentinel or Cluster failover can still lose.
//!
//! Every key is `{<prefix>}:…`, one Redis Cluster hash slot, so each script touches one shard.
//!
//! ## Lost replies never hand out a block twice
//!
//! A script is never sent twice (redis-rs resends an `EVALSHA` only when the server answered
//! `NOSCRIPT`, which means it did not run). Every write is a compare-and-set on the watermark
//! the decision was made from: a script whose reply was lost may have run; the next write of
//! this authority then compares a stale watermark, is refused, and is recomputed from the one
//! stored, so the lost block is burned, never reused.
//!
//! ## Timeouts and reconnection
//!
//! Every call (connecting included) is bounded by [`RedisConfig::op_timeout`]; a call that
//! fails on the connection or times out drops it, and the next call opens a new one.
//!
//! ## What it does not do
//!
//! Sentinel or Cluster discovery (one url, a primary), client certificates, paging `list`.

mod audit;
mod blocks;
mod conn;
mod keys;
mod leases;
mod record;
mod scripts;

pub use crate::config::RedisConfig;
use crate::StoreError;
use blocks::Slot;
use conn::Connection;
use idmint_core::NamespaceName;
use keys::Keys;
use scripts::Scripts;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

const KIND: &str = "redis";

/// The Redis authority. Cheap to share behind an `Arc`; holds one multiplexed connection
/// (which pipelines concurrent calls) to the server.
pub struct RedisAuthority {
    conn: Connection,
    config: RedisConfig,
    keys: Keys,
    scripts: Scripts,
    slots: Mutex<HashMap<NamespaceName, Slot>>,
    /// Per lease group: serializes this authority's acquisitions in it.
    groups: Mutex<HashMap<NamespaceName, Arc<tokio::sync::Mutex<()>>>>,
    conflicts: AtomicU64,
}

impl fmt::Debug for RedisAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisAuthority")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RedisAuthority {
    /// Connects to the server and checks it within `config.op_timeout`: Redis 7 or later
    /// (Valkey reports a compatible version), `appendonly yes`, `appendfsync always` and
    /// `maxmemory-policy noeviction`, unless `accept_unsafe_durability` (then a warning).
    ///
    /// [`StoreError::InvalidSetup`] for a config that cannot be right (url, prefix, TLS keys, a
    /// `WAIT` timeout not below the operation timeout) or a server that fails the checks;
    /// [`StoreError::Unavailable`] if it does not answer.
    pub async fn connect(config: RedisConfig) -> Result<Self, StoreError> {
        config
            .validate("authority")
            .map_err(|e| StoreError::InvalidSetup {
                message: format!("redis: {e}"),
            })?;
        let conn = Connection::open(&config)?;
        let authority = RedisAuthority {
            keys: Keys::new(&config.prefix),
            scripts: Scripts::new(),
            conn,
            config,
            slots: Mutex::new(HashMap::new()),
            groups: Mutex::new(HashMap::new()),
            conflicts: AtomicU64::new(0),
        };
        authority.check_server().await?;
        Ok(authority)
    }

    /// How many compare-and-set conflicts (another writer between this authority's decision
    /// and its write) were retried since it was created.
    pub fn conflicts_retried(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }

    /// The config it was created with.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    fn group_lock(&self, group: &NamespaceName) -> Arc<tokio::sync::Mutex<()>> {
        let mut groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        groups.entry(group.clone()).or_default().clone()
    }

    fn conflict(&self) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
    }
}

fn unavailable(message: String) -> StoreError {
    StoreError::Unavailable {
        backend: KIND,
        message,
    }
}
