//! The etcd authority (cargo feature `etcd`): namespaces and their watermarks as keys of an
//! etcd v3 cluster, updated by compare-and-swap transactions.
//!
//! Files, one job each: `client` (etcd's v3 API on tonic's channel: endpoints, TLS, login),
//! `request` (the requests and `Txn` operations, as etcd's messages), `conn` (the settings
//! checked, bounded calls, error messages), `record` (the text values of every key, format v1), `blocks` (the namespaces: the
//! compare-and-swap loop and [`Authority`](crate::Authority)), `leases`
//! ([`WorkerLeases`](crate::lease::WorkerLeases): group, worker and live keys on etcd leases),
//! `audit` ([`AuditLog`](crate::AuditLog): one key per entry, written by the transaction it
//! records).
//!
//! ## Durability and exclusivity
//!
//! An etcd `Txn` is acknowledged once its raft entry is committed by a quorum and applied; each
//! member fsyncs its WAL before acknowledging, so on `Ok` the new watermark survives a crash of
//! any minority of members (of the only member, for a single-node etcd). Two writes based on
//! the same revision cannot both succeed, which is what makes blocks disjoint across nodes.
//!
//! ## Lost replies never hand out a block twice
//!
//! The client never resends a compare-and-swap (but one etcd refused for an expired login
//! token, which it refuses before proposing it: see `client`): tonic does not retry, and this
//! module turns
//! any failed or timed-out `reserve`/`give_back` transaction into [`StoreError::Unavailable`]
//! and drops its cached state. (Only reads and `ensure_namespace`'s create-if-absent, which
//! are harmless to send twice, are retried once when they fail fast, e.g. on a connection the
//! server had just closed. A `give_back` is never resent: after a lost commit, the resent one
//! would be refused and its caller would keep using a tail already handed back.) A
//! transaction whose reply was lost may or may not have committed; either way every later
//! write is conditional on the exact `mod_revision` it read, and a commit of the lost
//! transaction changes that revision. So whichever of the two lands second fails its compare
//! and is recomputed from the value the first one wrote: the next `reserve` gets a block above
//! the possibly-granted one, which is burned (never handed out, never reused).
//!
//! ## Timeouts and reconnection
//!
//! Every call to etcd is bounded by [`EtcdConfig::op_timeout`] (also sent to etcd as the gRPC
//! deadline), and waiting behind other operations on the same namespace is bounded by it too,
//! so a stalled server yields `Unavailable`, never a hang. The gRPC channel, balanced across the
//! endpoints, reconnects by itself (lazily, on the next call) after a member restarts or the
//! connection is cut, and leaves calls to the members that answer; HTTP/2 keep-alive pings
//! (every 10 s while calls are in flight) drop a silently dead connection. Requests carry
//! etcd's `hasleader` flag: a member cut off from its leader answers at once instead of
//! waiting.
//!
//! ## What it does not do
//!
//! Client certificates (mutual TLS; server TLS with `ca_file` and user/password
//! authentication are supported), watches, deleting namespaces, compacting etcd's history
//! (configure etcd's `--auto-compaction-*`: every reservation is a new revision), and paging
//! `list` (one range read; fine for tens of thousands of namespaces).

mod audit;
mod blocks;
mod client;
mod conn;
mod leases;
mod record;
mod request;

use self::blocks::Slot;
use self::client::{ClientOptions, EtcdClient};
use self::conn::{redact, tls_options, unavailable};
pub use crate::config::EtcdConfig;
pub use crate::ops::MAX_CONFLICTS;
use crate::StoreError;
use idmint_core::NamespaceName;
use idmint_proto::etcd::etcdserverpb::{Compare, RangeRequest};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const KIND: &str = "etcd";

/// The etcd authority. Cheap to share behind an `Arc`; holds one gRPC channel (which
/// multiplexes concurrent calls) to the cluster.
pub struct EtcdAuthority {
    client: EtcdClient,
    config: EtcdConfig,
    /// `<prefix>ns/`.
    ns_prefix: String,
    /// `<prefix>leases/`.
    lease_prefix: String,
    /// `<prefix>audit/`.
    audit_prefix: String,
    slots: Mutex<HashMap<NamespaceName, Slot>>,
    /// Per lease group: serializes this authority's acquisitions in it.
    groups: Mutex<HashMap<NamespaceName, Arc<tokio::sync::Mutex<()>>>>,
    conflicts: AtomicU64,
}

impl fmt::Debug for EtcdAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let endpoints: Vec<String> = self.config.endpoints.iter().map(|e| redact(e)).collect();
        f.debug_struct("EtcdAuthority")
            .field("endpoints", &endpoints)
            .field("prefix", &self.config.prefix)
            .field("op_timeout", &self.config.op_timeout)
            .finish_non_exhaustive()
    }
}

impl EtcdAuthority {
    /// Connects to the cluster and checks, with one read, that it answers within
    /// `config.op_timeout`.
    ///
    /// [`StoreError::InvalidSetup`] if no endpoint is configured, the timeout is zero, or the
    /// TLS or login settings cannot be right (`verify-full` without a readable `ca_file`,
    /// `require`, an `http://` endpoint with TLS or an `https://` one without, `user` without
    /// `password`); [`StoreError::Unavailable`] if an endpoint is not a valid URL, etcd does not
    /// answer, or refuses the certificate check or the login.
    pub async fn connect(config: EtcdConfig) -> Result<Self, StoreError> {
        if config.endpoints.is_empty() {
            return Err(StoreError::InvalidSetup {
                message: "no etcd endpoint configured".to_owned(),
            });
        }
        if config.op_timeout.is_zero() {
            return Err(StoreError::InvalidSetup {
                message: "op_timeout must be above zero".to_owned(),
            });
        }
        let invalid = |message: String| StoreError::InvalidSetup { message };
        let tls = tls_options(&config).map_err(invalid)?;
        let login = match (&config.user, &config.password) {
            (Some(user), Some(password)) => Some((user.clone(), password.clone())),
            (None, None) => None,
            (Some(_), None) => return Err(invalid("etcd: user is set without password".into())),
            (None, Some(_)) => return Err(invalid("etcd: password is set without user".into())),
        };
        let options = ClientOptions {
            endpoints: config.endpoints.clone(),
            tls,
            login,
            timeout: config.op_timeout,
        };
        let client = match tokio::time::timeout(config.op_timeout, EtcdClient::connect(options))
            .await
        {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                let endpoints: Vec<String> = config.endpoints.iter().map(|e| redact(e)).collect();
                return Err(unavailable(format!(
                    "cannot connect to {}: {e}",
                    endpoints.join(",")
                )));
            }
            Err(_) => {
                return Err(unavailable(format!(
                    "connecting took longer than {:?}",
                    config.op_timeout
                )))
            }
        };
        let authority = EtcdAuthority {
            client,
            ns_prefix: format!("{}ns/", config.prefix),
            lease_prefix: format!("{}leases/", config.prefix),
            audit_prefix: format!("{}audit/", config.prefix),
            config,
            slots: Mutex::new(HashMap::new()),
            groups: Mutex::new(HashMap::new()),
            conflicts: AtomicU64::new(0),
        };
        // One linearizable read: a wrong endpoint, or a cluster without a leader, fails here.
        let probe = RangeRequest {
            count_only: true,
            ..request::get(authority.ns_prefix.clone())
        };
        authority
            .call_idempotent("probing etcd", |client| client.range(probe.clone()))
            .await?;
        Ok(authority)
    }

    /// How many compare-and-swap conflicts (another writer between this authority's read and
    /// its write) were retried since it was created.
    pub fn conflicts_retried(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }

    /// The config it was created with.
    pub fn config(&self) -> &EtcdConfig {
        &self.config
    }
}

/// A comparison that `key` is as read: at `mod_revision`, or absent (`None`).
fn unchanged(key: &str, mod_revision: Option<i64>) -> Compare {
    match mod_revision {
        Some(rev) => request::mod_revision_is(key, rev),
        None => request::create_revision_is(key, 0),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    #[test]
    fn config_defaults() {
        let config = EtcdConfig::new(["http://127.0.0.1:2379"]);
        assert_eq!(config.prefix, "/idmint/");
        assert_eq!(config.op_timeout, Duration::from_secs(5));
        assert_eq!(config.endpoints, vec!["http://127.0.0.1:2379".to_owned()]);
    }
}
