//! The etcd authority (cargo feature `etcd`): namespaces and their watermarks as keys of an
//! etcd v3 cluster, updated by compare-and-swap transactions.
//!
//! ## Keys and values (record format v1)
//!
//! One key per namespace, `<prefix>ns/<name>` (prefix [`EtcdConfig::prefix`], default
//! `/idmint/`, so `/idmint/ns/photos`), whose value is one line of ASCII text:
//!
//! ```text
//! idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=1001
//! ```
//!
//! The fields are always all present, in this order, separated by single spaces, numbers in
//! decimal without sign or leading zeros. A value is valid when it is exactly the canonical
//! encoding of a state whose spec `SequenceSpec::new(width, first, step, offset)` accepts and
//! whose watermark lies in `[first, max_id + 1]`; anything else (another version, a value
//! edited by hand, a key under the prefix whose suffix is not a namespace name) is
//! [`StoreError::Corrupt`], never a panic. Text, so that `etcdctl get --prefix /idmint/` is
//! readable.
//!
//! ## The audit ledger ([`AuditLog`], [`crate::audit`])
//!
//! One key per entry, `<prefix>audit/<subject>/<20 digits>` (subject: the namespace, or the
//! lease group of a worker-lease acquisition), whose value is [`audit::encode_record`]'s line
//! `v1 <at_unix_ms> <event> <a> <b> <holder>`:
//!
//! ```text
//! /idmint/audit/photos/00000000000000000412   v1 1700000005000 granted 1001 2001 web-1 pid 7
//! ```
//!
//! - **Same write.** The entry is put by the very `Txn` that writes the watermark (`reserve`,
//!   a `give_back` that returns, an `advance` that moves it) or the lease group
//!   (`WorkerLeases::acquire`), in its `Then` branch: no grant without its entry, no entry
//!   without its grant, also when a reply is lost. A refused give-back, an `advance` that
//!   changes nothing, a renewal and a release write none.
//! - **seq** is the entry key's `create_revision`: the revision of that `Txn`, global to the
//!   cluster, so it increases in commit order within a subject (and across subjects, where it
//!   means nothing).
//! - **The name** is the revision the write is conditioned on, zero-padded to 20 digits: the
//!   namespace key's `mod_revision` compared by the CAS (the lease group key's, or for a new
//!   group the revision of the read the decision rests on). It is unique (each write of the
//!   key compares a newer revision), below the entry's own seq and at or above the seq of the
//!   subject's previous entry, so key order is seq order: [`AuditLog::entries`] is one range
//!   read from the key named `after` (plus, when that page cannot show there is none, a
//!   filtered read of the older keys for the one entry named below `after` with a seq above
//!   it).
//! - **Time** is the writing process's clock ([`audit::now_unix_ms`]): etcd offers none.
//!   Compacting etcd's history changes neither: a live key keeps its create revision.
//! - `subjects`: range reads of the keys only, 500 at a time, skipping to the next subject
//!   after each page; `prune`: reads the whole ledger 500 entries at a time and deletes those
//!   older than the cut-off in `Txn`s of 64 deletes (etcd's `--max-txn-ops` is 128 by
//!   default).
//! - No schema: keys appear with the first write, so a store written by an older version
//!   upgrades in place (its ledger starts with the first write after the upgrade).
//! - Readers validate what they read: a name that is not 20 digits or not below the key's
//!   create revision, a value [`audit::decode_record`] refuses, a subject that is no
//!   namespace name are [`StoreError::Corrupt`].
//! - Cost: none in round trips (one more `Put` in a `Txn` that was sent anyway); every entry
//!   is a key of etcd's keyspace for as long as it is kept, so size etcd's
//!   `--quota-backend-bytes` for the retention, and prune.
//!
//! ## Operations relied on (etcd v3 KV API, etcd 3.4 or later)
//!
//! - `ensure_namespace`: one `Txn` `If(create_revision(key) == 0) Then(Put(key, state))
//!   Else(Get(key))`: created once, the losers of a race read the winner's record and compare
//!   specs.
//! - `reserve` and `give_back`: compare-and-swap on the key's `mod_revision`:
//!   `Txn If(mod_revision(key) == rev) Then(Put(key, new)) Else(Get(key))`, where `rev` and the
//!   state the new value was computed from (with [`SequenceSpec::reserve`], in Rust) were read
//!   together. On a conflict (another node wrote in between) the `Else` branch returns the
//!   fresh value and revision and the operation is computed again from it at once; after a
//!   few conflicts in a row it first pauses (random, exponential, at most 64 ms) and reads the
//!   key afresh. After [`MAX_CONFLICTS`] conflicts it gives up with
//!   [`StoreError::Unavailable`].
//!   The `Then` branch also puts the write's audit entry (above).
//!   The state and revision of the last successful write are cached per namespace, so a
//!   reservation is normally a single round trip; a stale cache only costs one conflict.
//!   A decision that writes nothing (a refused `give_back`, `Exhausted`) is never taken on
//!   cached data: the key is read again first.
//! - `advance`: the same compare-and-swap loop; a watermark already at or above the target is
//!   confirmed on a fresh read and written nothing.
//! - `state`: `Get(key)`; `list`: `Get(<prefix>ns/, prefix)`. Both are linearizable reads
//!   (etcd's default), not serializable ones.
//!
//! Within one `EtcdAuthority`, operations on the same namespace run one at a time (an async
//! mutex per namespace), so the tasks of one process do not compete for the CAS; conflicts
//! come only from other processes. [`EtcdAuthority::conflicts_retried`] counts them.
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
//! The client never resends a compare-and-swap: tonic does not retry, and this module turns
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
//! so a stalled server yields `Unavailable`, never a hang. The gRPC channel reconnects by
//! itself (lazily, on the next call) after the server restarts or the connection is cut;
//! HTTP/2 keep-alive pings (every 10 s while calls are in flight) drop a silently dead
//! connection. Requests carry etcd's `require-leader` flag: a member cut off from its leader
//! answers at once instead of waiting.
//!
//! ## The store's incarnation
//!
//! `<prefix>incarnation` holds the store's incarnation ([`crate::incarnation`]), put by a `Txn`
//! conditional on the key never having been created.
//!
//! ## Worker leases
//!
//! [`WorkerLeases`] keeps, under `<prefix>leases/<group>/`:
//!
//! - `group`: `idmint.lease-group/v1 last_token=7 layout=<layout>` (no etcd lease);
//! - `worker/<id>`: the durable record of a worker id, `idmint.worker/v1 token=7
//!   floor=1700000005000 holder=<holder>` (no etcd lease: it outlives every holder);
//! - `live/<id>`: `idmint.live/v1 token=7 ttl=60 holder=<holder>`, **attached to an etcd
//!   lease** granted for that acquisition. The worker id is live exactly while this key exists,
//!   so expiry is etcd's: when the etcd lease runs out (or is revoked), etcd deletes the key and
//!   the worker id is free, whatever the clocks of the nodes say.
//!
//! Layout and holder are the rest of their line. Every value is validated (canonical form, a
//! live key only next to a record with its token) or [`StoreError::Corrupt`].
//!
//! - `acquire`: one linearizable range read of the group's keys, [`plan_acquire`] on them, an
//!   etcd lease granted (`LeaseGrant`, the TTL rounded up to whole seconds; etcd raises it to its
//!   minimum, 2 s by default, and the granted TTL is reported), then one `Txn` comparing what the
//!   decision rests on (the group key's `mod_revision`, or its absence; the chosen worker's
//!   record's `mod_revision` or absence; its live key's absence) that writes the group key,
//!   the record, the live key and the acquisition's audit entry (`leased`). Every acquisition writes the group key, so two of them in one
//!   group never both commit on the same read: tokens strictly grow. On a conflict it reads
//!   again and retries (as reservations do, at most [`MAX_CONFLICTS`] times, reusing the etcd
//!   lease); an etcd lease left unused (a refusal, an error, a failed transaction) is revoked.
//!   Within one authority, acquisitions in one group run one at a time. A refusal (`Held`,
//!   `PoolFull`) reports the time left from `LeaseTimeToLive` of the live keys' etcd leases.
//! - `renew`: reads the record and live key of the worker id (one read-only `Txn`), refuses
//!   ([`LeaseError::Superseded`], nothing written) unless the record names the lease (token
//!   and holder: a live key next to it is then the lease's own, written with the record), raises the
//!   floor with a `Txn` comparing the `mod_revision`s read, and sends one `LeaseKeepAlive` for the
//!   live key's etcd lease, which restarts its TTL. If the live key is gone (the etcd lease ran
//!   out, nobody acquired since), the lease is re-established: a new etcd lease, and one `Txn`
//!   (conditional on the group key's and record's revisions and the live key's absence) that
//!   writes the live key, the group key again and a `leased` ledger entry for the same token
//!   and holder.
//! - `release`: one `Txn` (conditional on the record's and live key's `mod_revision`s read)
//!   that sets the floor and deletes the live key, then revokes the etcd lease.
//! - `group`: one range read, and `LeaseTimeToLive` for each live key.
//!
//! Lost replies: none of these transactions is resent. An acquisition that fails after its
//! etcd lease was granted revokes it, so a transaction that committed unseen frees its worker
//! id at once (its token is burned; the next one is larger). A renewal or release that fails
//! may have committed: raising a floor is always safe, and a release sent again finds its token
//! still current and does the same again. A renewal whose etcd lease runs out between its floor
//! write and its keep-alive looks again, and answers `Superseded` if someone acquired the
//! worker id meanwhile (the floor it raised then binds the new holder too).
//!
//! etcd keeps its leases across restarts (a new leader extends each one by its TTL), so a kill
//! of etcd frees no worker id early. A node's clock decides nothing: it only judges, with a
//! margin, its own lease (docs/design.md invariant 4).
//!
//! ## What it does not do
//!
//! Client certificates (mutual TLS; server TLS with `ca_file` and user/password
//! authentication are supported), watches, deleting namespaces, compacting etcd's history (configure etcd's `--auto-compaction-*`: every
//! reservation is a new revision), and paging `list` (one range read; fine for tens of
//! thousands of namespaces).

use crate::audit::{self, Advance, Advanced, AuditEntry, AuditEvent, AuditLog};
pub use crate::config::EtcdConfig;
use crate::lease::{
    check_current, plan_acquire, GroupRecord, LeaseError, LeaseRequest, WorkerLease, WorkerLeases,
    WorkerSlot,
};
use crate::{ops, Authority, GiveBack, Incarnation, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, KeyValue, KvClient, LeaseClient,
    PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use idmint_core::{Backoff, Block, NamespaceName, SequenceSpec, Width};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

const KIND: &str = "etcd";
/// The first field of every record; the version of the record format.
const FORMAT: &str = "idmint.ns/v1";
pub use crate::ops::MAX_CONFLICTS;
/// HTTP/2 keep-alive interval. etcd refuses pings more often than every 5 s by default.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);
const TCP_KEEP_ALIVE: Duration = Duration::from_secs(30);

/// The cached result of the last write of a namespace by this authority.
#[derive(Debug, Clone)]
struct Cached {
    state: NamespaceState,
    mod_revision: i64,
}

/// Per namespace: serializes this authority's operations on it and holds its cached record.
type Slot = Arc<tokio::sync::Mutex<Option<Cached>>>;

/// The etcd authority. Cheap to share behind an `Arc`; holds one gRPC channel (which
/// multiplexes concurrent calls) to the cluster.
pub struct EtcdAuthority {
    kv: KvClient,
    lease: LeaseClient,
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
    // Keeps the endpoint list of the balanced channel alive.
    _client: Client,
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

/// The TLS options of `config` (`None`: plain), after checking them against the endpoints.
fn tls_options(config: &EtcdConfig) -> Result<Option<etcd_client::TlsOptions>, String> {
    use crate::tls::TlsMode;
    if config.tls == TlsMode::Require {
        return Err(
            "etcd: tls = \"require\" is not supported (the gRPC client always checks the certificate): set tls = \"verify-full\" and ca_file"
                .into(),
        );
    }
    let pem = crate::tls::ca_pem(config.tls, config.ca_file.as_deref())
        .map_err(|e| format!("etcd TLS: {e}"))?;
    for endpoint in &config.endpoints {
        let (https, http) = (
            endpoint.starts_with("https://"),
            endpoint.starts_with("http://"),
        );
        if pem.is_some() && http {
            return Err(format!(
                "etcd: endpoint {} is http:// but tls is on: use https://",
                redact(endpoint)
            ));
        }
        if pem.is_none() && https {
            return Err(format!(
                "etcd: endpoint {} is https://: set tls = \"verify-full\" and ca_file",
                redact(endpoint)
            ));
        }
    }
    Ok(pem.map(|pem| {
        etcd_client::TlsOptions::new().ca_certificate(etcd_client::Certificate::from_pem(pem))
    }))
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
        let mut options = ConnectOptions::new()
            .with_connect_timeout(config.op_timeout)
            .with_timeout(config.op_timeout)
            .with_keep_alive(KEEP_ALIVE_INTERVAL, config.op_timeout)
            .with_tcp_keepalive(TCP_KEEP_ALIVE)
            .with_require_leader(true);
        let invalid = |message: String| StoreError::InvalidSetup { message };
        if let Some(tls) = tls_options(&config).map_err(invalid)? {
            options = options.with_tls(tls);
        }
        match (&config.user, &config.password) {
            (Some(user), Some(password)) => {
                // Simple tokens expire (`--auth-token-ttl`, 5 min by default): log in again
                // then, instead of failing every call from that point on.
                options = options
                    .with_user(user.clone(), password.clone())
                    .with_auto_token_refresh(true);
            }
            (None, None) => {}
            (Some(_), None) => return Err(invalid("etcd: user is set without password".into())),
            (None, Some(_)) => return Err(invalid("etcd: password is set without user".into())),
        }
        let client = match tokio::time::timeout(
            config.op_timeout,
            Client::connect(&config.endpoints, Some(options)),
        )
        .await
        {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                let endpoints: Vec<String> = config.endpoints.iter().map(|e| redact(e)).collect();
                return Err(unavailable(format!(
                    "cannot connect to {}: {}",
                    endpoints.join(","),
                    describe(&e)
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
            kv: client.kv_client(),
            lease: client.lease_client(),
            ns_prefix: format!("{}ns/", config.prefix),
            lease_prefix: format!("{}leases/", config.prefix),
            audit_prefix: format!("{}audit/", config.prefix),
            config,
            slots: Mutex::new(HashMap::new()),
            groups: Mutex::new(HashMap::new()),
            conflicts: AtomicU64::new(0),
            _client: client,
        };
        // One linearizable read: a wrong endpoint, or a cluster without a leader, fails here.
        let probe = authority.ns_prefix.clone();
        authority
            .call_idempotent("probing etcd", |mut kv| {
                let probe = probe.clone();
                async move {
                    kv.get(probe, Some(GetOptions::new().with_count_only()))
                        .await
                }
            })
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

    fn key(&self, name: &NamespaceName) -> String {
        format!("{}{}", self.ns_prefix, name.as_str())
    }

    /// Runs one etcd call under the timeout; every failure is `Unavailable`. Never resends.
    async fn call<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.config.op_timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(unavailable(format!("{what}: {}", describe(&e)))),
            Err(_) => Err(unavailable(format!(
                "{what}: no answer within {:?}",
                self.config.op_timeout
            ))),
        }
    }

    /// Like [`Self::call`] for a request that may be sent twice without harm (a read, or the
    /// create-if-absent of `ensure_namespace`): a failure that came back before the timeout,
    /// typically a request sent on a connection the server had just closed, is retried once,
    /// within what is left of the timeout, on the reconnected channel.
    async fn call_idempotent<T, F, Fut>(&self, what: &str, make: F) -> Result<T, StoreError>
    where
        F: Fn(KvClient) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.config.op_timeout;
        let timed_out = || {
            unavailable(format!(
                "{what}: no answer within {:?}",
                self.config.op_timeout
            ))
        };
        match tokio::time::timeout_at(deadline, make(self.kv.clone())).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(_)) => {}
            Err(_) => return Err(timed_out()),
        }
        match tokio::time::timeout_at(deadline, make(self.kv.clone())).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(unavailable(format!("{what}: {}", describe(&e)))),
            Err(_) => Err(timed_out()),
        }
    }

    /// The namespace's record and its `mod_revision`, read now (linearizable).
    async fn read(&self, name: &NamespaceName) -> Result<Option<Cached>, StoreError> {
        let key = self.key(name);
        let response = self
            .call_idempotent(&format!("reading namespace {name}"), |mut kv| {
                let key = key.clone();
                async move { kv.get(key, None).await }
            })
            .await?;
        match response.kvs().first() {
            Some(record) => Ok(Some(cached(name, record)?)),
            None => Ok(None),
        }
    }

    fn slot(&self, name: &NamespaceName) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.entry(name.clone()).or_default().clone()
    }

    /// Forgets the slot of a namespace that does not exist, unless another task uses it.
    fn forget_slot(&self, name: &NamespaceName) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if slots
            .get(name)
            .is_some_and(|slot| Arc::strong_count(slot) == 1)
        {
            slots.remove(name);
        }
    }

    /// The read-compute-CAS loop of `reserve` and `give_back`: `decide` maps the current state
    /// to what to write (if anything) and the answer.
    async fn update<T>(
        &self,
        name: &NamespaceName,
        decide: impl Fn(&NamespaceState) -> Result<ops::Decision<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let result = {
            let slot = self.slot(name);
            let waited = tokio::time::timeout(self.config.op_timeout, slot.lock()).await;
            match waited {
                Ok(mut cache) => self.update_locked(name, &mut cache, decide).await,
                Err(_) => Err(unavailable(format!(
                    "namespace {name}: waited longer than {:?} behind earlier operations",
                    self.config.op_timeout
                ))),
            }
        };
        if matches!(result, Err(StoreError::UnknownNamespace { .. })) {
            self.forget_slot(name);
        }
        result
    }

    async fn update_locked<T>(
        &self,
        name: &NamespaceName,
        cache: &mut Option<Cached>,
        decide: impl Fn(&NamespaceState) -> Result<ops::Decision<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let unknown = || StoreError::UnknownNamespace { name: name.clone() };
        let key = self.key(name);
        // Taken out: an error below leaves the cache empty, so the next call reads afresh.
        let mut current: Option<(Cached, bool)> = cache.take().map(|c| (c, false));
        let mut backoff = ops::conflict_backoff();
        loop {
            let (record, fresh) = match current.take() {
                Some(known) => known,
                None => (self.read(name).await?.ok_or_else(unknown)?, true),
            };
            let decision = decide(&record.state);
            let (new_state, event, answer) = match decision {
                // Only write decisions may rest on cached data (the CAS checks them); a
                // refusal or an error is confirmed on a fresh read.
                Ok(ops::Decision::Keep(_)) | Err(_) if !fresh => continue,
                Err(e) => {
                    *cache = Some(record);
                    return Err(e);
                }
                Ok(ops::Decision::Keep(answer)) => {
                    *cache = Some(record);
                    return Ok(answer);
                }
                Ok(ops::Decision::Write(new_state, event, answer)) => (new_state, event, answer),
            };
            // The entry's key is named after the revision the write is conditioned on: unique
            // (each write of the key compares a newer one) and below the revision it creates.
            let entry = self.audit_key(name, record.mod_revision);
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    record.mod_revision,
                )])
                .and_then([
                    TxnOp::put(key.clone(), encode(&new_state), None),
                    TxnOp::put(entry, audit_value(&event), None),
                ])
                .or_else([TxnOp::get(key.clone(), None)]);
            let mut kv = self.kv.clone();
            let response = self
                .call(&format!("updating namespace {name}"), kv.txn(txn))
                .await?;
            if response.succeeded() {
                // The put's mod_revision is the revision the transaction created.
                *cache = response.header().map(|h| Cached {
                    state: new_state,
                    mod_revision: h.revision(),
                });
                return Ok(answer);
            }
            // Another writer came first: go again from what it wrote.
            self.conflicts.fetch_add(1, Ordering::Relaxed);
            let Some(pause) = backoff.next() else {
                return Err(unavailable(format!(
                    "namespace {name}: gave up after {MAX_CONFLICTS} conflicting writes by \
                     other nodes; retry later"
                )));
            };
            let fresh = else_record(name, &response)?.ok_or_else(unknown)?;
            if pause.is_zero() {
                // Retry at once with what the winner wrote: that is as fresh as data gets.
                current = Some((fresh, true));
            } else {
                // Hot contention: step aside for a random while, then read afresh (data kept
                // across the pause would be stale by the time it is used).
                tokio::time::sleep(pause).await;
                current = None;
            }
        }
    }
}

#[async_trait]
impl Authority for EtcdAuthority {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn worker_leases(&self) -> Option<&dyn WorkerLeases> {
        Some(self)
    }

    fn audit_log(&self) -> Option<&dyn AuditLog> {
        Some(self)
    }

    async fn incarnation(&self) -> Result<Option<Incarnation>, StoreError> {
        let key = self.incarnation_key();
        let response = self
            .call_idempotent("reading the store's incarnation", |mut kv| {
                let key = key.clone();
                async move { kv.get(key, None).await }
            })
            .await?;
        response
            .kvs()
            .first()
            .map(|kv| decode_incarnation(kv.value()))
            .transpose()
    }

    /// One `Txn`: put if the key was never created; then the key as it is.
    async fn create_incarnation(&self, candidate: &Incarnation) -> Result<Incarnation, StoreError> {
        let key = self.incarnation_key();
        let txn = Txn::new()
            .when([unchanged(&key, None)])
            .and_then([TxnOp::put(key.clone(), candidate.as_str(), None)]);
        let mut kv = self.kv.clone();
        self.call("writing the store's incarnation", kv.txn(txn))
            .await?;
        self.incarnation()
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                message: "the store's incarnation is missing right after it was written".into(),
            })
    }

    async fn advance(
        &self,
        name: &NamespaceName,
        to: u64,
        why: Advance,
    ) -> Result<Advanced, StoreError> {
        self.update(name, |state| ops::decide_advance(state, to, why))
            .await
    }

    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let key = self.key(name);
        let created = NamespaceState::new(name.clone(), spec);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), encode(&created), None)])
            .or_else([TxnOp::get(key, None)]);
        // Sending it twice is harmless: the second finds the first's record and compares specs.
        let response = self
            .call_idempotent(&format!("creating namespace {name}"), |mut kv| {
                let txn = txn.clone();
                async move { kv.txn(txn).await }
            })
            .await?;
        if response.succeeded() {
            return Ok(created);
        }
        let existing = else_record(name, &response)?.ok_or_else(|| {
            unavailable(format!(
                "namespace {name}: etcd reported the key both present and absent"
            ))
        })?;
        match ops::ensure(name, Some(&existing.state), spec)? {
            None => Ok(existing.state),
            // ops::ensure only creates when nothing exists.
            Some(_) => Err(unavailable(format!(
                "namespace {name}: inconsistent ensure"
            ))),
        }
    }

    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        self.update(name, |state| ops::decide_reserve(state, count))
            .await
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        Ok(self.read(name).await?.map(|c| c.state))
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        let response = self
            .call_idempotent("listing namespaces", |mut kv| {
                let prefix = self.ns_prefix.clone();
                async move { kv.get(prefix, Some(GetOptions::new().with_prefix())).await }
            })
            .await?;
        let mut all = Vec::with_capacity(response.kvs().len());
        for record in response.kvs() {
            let key = String::from_utf8_lossy(record.key());
            let suffix = key.strip_prefix(&self.ns_prefix).unwrap_or(&key);
            let name = NamespaceName::new(suffix).map_err(|e| StoreError::Corrupt {
                message: format!("etcd key {key:?} is not a namespace: {e}"),
            })?;
            all.push(decode(&name, record.value())?);
        }
        // etcd returns keys in byte order, which is the names' order; sort anyway rather than
        // depend on it.
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        self.update(name, |state| ops::decide_give_back(state, tail))
            .await
    }
}

/// The first field of a lease group's record.
const GROUP_FORMAT: &str = "idmint.lease-group/v1";
/// The first field of a worker id's durable record.
const WORKER_FORMAT: &str = "idmint.worker/v1";
/// The first field of a worker id's live key.
const LIVE_FORMAT: &str = "idmint.live/v1";
/// How many live leases a refused acquisition asks etcd the time left of.
const REFUSAL_TTL_QUERIES: usize = 8;

/// A worker id's durable record as read, with its `mod_revision`.
#[derive(Debug, Clone)]
struct RecordRead {
    slot: WorkerSlot,
    mod_revision: i64,
}

/// A worker id's live key as read.
#[derive(Debug, Clone)]
struct LiveRead {
    token: u64,
    ttl_secs: u64,
    lease_id: i64,
    mod_revision: i64,
}

/// A lease group's keys as read by one range read.
#[derive(Debug, Default)]
struct GroupRead {
    /// The revision of the store the read saw.
    revision: i64,
    record: Option<(GroupRecord, i64)>,
    workers: BTreeMap<u64, (RecordRead, Option<LiveRead>)>,
}

impl GroupRead {
    /// The slots, live ones with `expires_in` from `expiry` (by worker id) or else the TTL
    /// their live key was granted with.
    fn slots(&self, expiry: &BTreeMap<u64, Duration>) -> Vec<WorkerSlot> {
        self.workers
            .iter()
            .map(|(worker, (record, live))| WorkerSlot {
                expires_in: live.as_ref().map(|l| {
                    expiry
                        .get(worker)
                        .copied()
                        .unwrap_or(Duration::from_secs(l.ttl_secs))
                }),
                ..record.slot.clone()
            })
            .collect()
    }
}

/// What became of an etcd lease asked about.
enum Remaining {
    Left(Duration),
    Gone,
}

impl EtcdAuthority {
    /// `<prefix>incarnation`: the store's incarnation ([`crate::incarnation`]).
    fn incarnation_key(&self) -> String {
        format!("{}incarnation", self.config.prefix)
    }

    fn group_prefix(&self, group: &NamespaceName) -> String {
        format!("{}{}/", self.lease_prefix, group.as_str())
    }

    fn group_key(&self, group: &NamespaceName) -> String {
        format!("{}group", self.group_prefix(group))
    }

    fn worker_key(&self, group: &NamespaceName, worker: u64) -> String {
        format!("{}worker/{worker}", self.group_prefix(group))
    }

    fn live_key(&self, group: &NamespaceName, worker: u64) -> String {
        format!("{}live/{worker}", self.group_prefix(group))
    }

    fn group_lock(&self, group: &NamespaceName) -> Arc<tokio::sync::Mutex<()>> {
        let mut groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        groups.entry(group.clone()).or_default().clone()
    }

    /// Every key of `group`, read at one revision (linearizable).
    async fn read_group(&self, group: &NamespaceName) -> Result<GroupRead, StoreError> {
        let prefix = self.group_prefix(group);
        let response = self
            .call_idempotent(&format!("reading lease group {group}"), |mut kv| {
                let prefix = prefix.clone();
                async move { kv.get(prefix, Some(GetOptions::new().with_prefix())).await }
            })
            .await?;
        let mut read = GroupRead {
            revision: response.header().map_or(0, |h| h.revision()),
            ..GroupRead::default()
        };
        let mut lives = BTreeMap::new();
        for kv in response.kvs() {
            let key = String::from_utf8_lossy(kv.key());
            let suffix = key.strip_prefix(&prefix).unwrap_or(&key);
            if suffix == "group" {
                read.record = Some((decode_group(group, kv.value())?, kv.mod_revision()));
            } else if let Some(worker) = suffix.strip_prefix("worker/") {
                let worker = parse_worker(group, &key, worker)?;
                let record = decode_record(group, worker, kv)?;
                read.workers.insert(worker, (record, None));
            } else if let Some(worker) = suffix.strip_prefix("live/") {
                let worker = parse_worker(group, &key, worker)?;
                lives.insert(worker, decode_live(group, worker, kv)?);
            } else {
                return Err(StoreError::Corrupt {
                    message: format!("etcd key {key:?} is no key of lease group {group}"),
                });
            }
        }
        for (worker, live) in lives {
            let entry = read.workers.get_mut(&worker);
            match entry {
                Some((record, slot)) if record.slot.token == live.token => *slot = Some(live),
                _ => return Err(live_without_record(group, worker, live.token)),
            }
        }
        if read.record.is_none() && !read.workers.is_empty() {
            return Err(StoreError::Corrupt {
                message: format!("lease group {group} has worker records but no group record"),
            });
        }
        Ok(read)
    }

    /// The record and live key of one worker id, read at one revision (a read-only `Txn`).
    async fn read_worker(
        &self,
        group: &NamespaceName,
        worker: u64,
    ) -> Result<(Option<RecordRead>, Option<LiveRead>), StoreError> {
        let txn = Txn::new().and_then([
            TxnOp::get(self.worker_key(group, worker), None),
            TxnOp::get(self.live_key(group, worker), None),
        ]);
        let response = self
            .call_idempotent(
                &format!("reading worker {worker} of lease group {group}"),
                |mut kv| {
                    let txn = txn.clone();
                    async move { kv.txn(txn).await }
                },
            )
            .await?;
        let mut gets = response.op_responses().into_iter().map(|op| match op {
            TxnOpResponse::Get(get) => Ok(get.kvs().first().cloned()),
            _ => Err(unavailable(format!(
                "lease group {group}: etcd answered a read without its values"
            ))),
        });
        let (record, live) = match (gets.next(), gets.next()) {
            (Some(record), Some(live)) => (record?, live?),
            _ => {
                return Err(unavailable(format!(
                    "lease group {group}: etcd answered a read without its values"
                )))
            }
        };
        let record = record
            .map(|kv| decode_record(group, worker, &kv))
            .transpose()?;
        let live = live.map(|kv| decode_live(group, worker, &kv)).transpose()?;
        match (&record, &live) {
            (Some(r), Some(l)) if r.slot.token != l.token => {
                Err(live_without_record(group, worker, l.token))
            }
            (None, Some(l)) => Err(live_without_record(group, worker, l.token)),
            _ => Ok((record, live)),
        }
    }

    /// Grants an etcd lease of at least `ttl` (whole seconds); its id and granted TTL.
    async fn grant(&self, ttl: Duration) -> Result<(i64, Duration), StoreError> {
        let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let secs = i64::try_from(secs.max(1)).unwrap_or(i64::MAX);
        let mut lease = self.lease.clone();
        let granted = self
            .call("granting an etcd lease", lease.grant(secs, None))
            .await?;
        if !granted.error().is_empty() || granted.id() == 0 {
            return Err(unavailable(format!(
                "etcd refused a lease of {secs} s: {}",
                granted.error()
            )));
        }
        let ttl = u64::try_from(granted.ttl().max(secs)).unwrap_or(u64::MAX);
        Ok((granted.id(), Duration::from_secs(ttl)))
    }

    /// Revokes an etcd lease this authority granted and does not use; a failure is harmless
    /// (the lease runs out by itself, and keys attached to it were meant to go anyway).
    /// Sent twice if the first fails (revoking is idempotent), typically on a connection the
    /// server had just closed: a lease left behind would hold its worker id for a whole TTL.
    async fn revoke_quietly(&self, id: i64) {
        let deadline = tokio::time::Instant::now() + self.config.op_timeout;
        let mut failure = String::new();
        for _ in 0..2 {
            let mut lease = self.lease.clone();
            match tokio::time::timeout_at(deadline, lease.revoke(id)).await {
                Ok(Ok(_)) => return,
                // Already gone (revoked by the first attempt, or expired).
                Ok(Err(etcd_client::Error::GRpcStatus(status)))
                    if status.message().contains("lease not found") =>
                {
                    return
                }
                Ok(Err(e)) => failure = describe(&e),
                Err(_) => {
                    failure = format!("no answer within {:?}", self.config.op_timeout);
                    break;
                }
            }
        }
        tracing::debug!("etcd lease {id:x} not revoked (it expires by itself): {failure}");
    }

    /// What etcd says is left of lease `id`.
    async fn remaining(&self, id: i64) -> Result<Remaining, StoreError> {
        let mut lease = self.lease.clone();
        let answer = self
            .call("reading an etcd lease", lease.time_to_live(id, None))
            .await?;
        Ok(match u64::try_from(answer.ttl()) {
            // Under a second left (etcd counts whole seconds, rounding down).
            Ok(0) => Remaining::Left(Duration::from_millis(500)),
            Ok(secs) => Remaining::Left(Duration::from_secs(secs)),
            Err(_) => Remaining::Gone,
        })
    }

    /// The time left of each live key of `read` (only of `only`, if given), from etcd;
    /// `None` if one of them is gone since (read again).
    async fn expiries(
        &self,
        read: &GroupRead,
        only: Option<u64>,
    ) -> Result<Option<BTreeMap<u64, Duration>>, StoreError> {
        let mut expiry = BTreeMap::new();
        let live = read
            .workers
            .iter()
            .filter_map(|(worker, (_, live))| live.as_ref().map(|l| (worker, l)))
            .filter(|(worker, _)| only.is_none_or(|w| w == **worker));
        // A full pool's error names the first few live leases with their time left, the rest
        // with the TTL they were granted (an upper bound): a question per live lease of a
        // large group would make a refusal slow.
        for (worker, live) in live.take(REFUSAL_TTL_QUERIES) {
            match self.remaining(live.lease_id).await? {
                Remaining::Left(left) => {
                    expiry.insert(*worker, left);
                }
                Remaining::Gone => return Ok(None),
            }
        }
        Ok(Some(expiry))
    }

    /// Counts a conflict of a lease transaction; `Unavailable` after too many.
    async fn lease_conflict(&self, what: &str, backoff: &mut Backoff) -> Result<(), StoreError> {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
        let Some(pause) = backoff.next() else {
            return Err(unavailable(format!(
                "{what}: gave up after {MAX_CONFLICTS} conflicting writes by other nodes; retry \
                 later"
            )));
        };
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
        Ok(())
    }

    async fn acquire_locked(
        &self,
        request: &LeaseRequest,
        granted: &mut Option<(i64, Duration)>,
    ) -> Result<WorkerLease, LeaseError> {
        let group = &request.group;
        let what = format!("acquiring a worker of lease group {group}");
        let mut backoff = ops::conflict_backoff();
        loop {
            let read = self.read_group(group).await?;
            let record = read.record.as_ref().map(|(r, _)| r);
            let grant = match plan_acquire(request, record, &read.slots(&BTreeMap::new())) {
                Ok(grant) => grant,
                Err(refused @ (LeaseError::Held { .. } | LeaseError::PoolFull { .. })) => {
                    // Say how long the live leases have left, by etcd's clock.
                    let only = match &refused {
                        LeaseError::Held { worker, .. } => Some(*worker),
                        _ => None,
                    };
                    match self.expiries(&read, only).await? {
                        Some(expiry) => {
                            return Err(plan_acquire(request, record, &read.slots(&expiry))
                                .err()
                                .unwrap_or(refused))
                        }
                        // A live lease ran out meanwhile: decide again on a fresh read.
                        None => continue,
                    }
                }
                Err(e) => return Err(e),
            };
            let (lease_id, ttl) = match *granted {
                Some(known) => known,
                None => *granted.insert(self.grant(request.ttl).await?),
            };
            let group_key = self.group_key(group);
            let worker_key = self.worker_key(group, grant.worker);
            let live_key = self.live_key(group, grant.worker);
            let record_rev = read
                .workers
                .get(&grant.worker)
                .map(|(record, _)| record.mod_revision);
            let slot = WorkerSlot {
                worker: grant.worker,
                token: grant.token,
                holder: request.holder.clone(),
                floor_unix_ms: grant.floor_unix_ms,
                expires_in: None,
            };
            // The entry is named after the revision the write rests on: the group key's (every
            // acquisition writes it), or the read's for a new group; below the revision the
            // transaction creates and above every earlier entry's of the group.
            let group_rev = read.record.as_ref().map(|(_, rev)| *rev);
            if group_rev.is_none() && read.revision <= 0 {
                return Err(unavailable(format!(
                    "lease group {group}: etcd answered a read without its revision"
                ))
                .into());
            }
            let entry = self.audit_key(group, group_rev.unwrap_or(read.revision));
            let event = AuditEvent::Leased {
                worker: grant.worker,
                token: grant.token,
            };
            let txn = Txn::new()
                .when([
                    unchanged(&group_key, group_rev),
                    unchanged(&worker_key, record_rev),
                    unchanged(&live_key, None),
                    // Defence in depth: entry names are unique by construction.
                    unchanged(&entry, None),
                ])
                .and_then([
                    TxnOp::put(entry.clone(), audit_value_by(&event, &request.holder), None),
                    TxnOp::put(group_key, encode_group(&grant.group), None),
                    TxnOp::put(worker_key, encode_record(&slot), None),
                    TxnOp::put(
                        live_key,
                        encode_live(grant.token, ttl, &request.holder),
                        Some(PutOptions::new().with_lease(lease_id)),
                    ),
                ]);
            let mut kv = self.kv.clone();
            let response = self.call(&what, kv.txn(txn)).await?;
            if response.succeeded() {
                *granted = None;
                return Ok(WorkerLease {
                    group: group.clone(),
                    worker: grant.worker,
                    token: grant.token,
                    floor_unix_ms: grant.floor_unix_ms,
                    ttl,
                    holder: request.holder.clone(),
                });
            }
            self.lease_conflict(&what, &mut backoff).await?;
        }
    }

    /// Sends one keep-alive for etcd lease `id`: `false` if etcd no longer has it.
    async fn keep_alive_once(&self, id: i64) -> Result<bool, StoreError> {
        let mut lease = self.lease.clone();
        let sent = tokio::time::timeout(self.config.op_timeout, lease.keep_alive(id)).await;
        match sent {
            // The client has read etcd's answer (a TTL above zero) before it returns; dropping
            // the keeper and the stream ends the keep-alive stream.
            Ok(Ok(_)) => Ok(true),
            Ok(Err(etcd_client::Error::LeaseKeepAliveError(_))) => Ok(false),
            Ok(Err(e)) => Err(unavailable(format!(
                "renewing an etcd lease: {}",
                describe(&e)
            ))),
            Err(_) => Err(unavailable(format!(
                "renewing an etcd lease: no answer within {:?}",
                self.config.op_timeout
            ))),
        }
    }
}

/// A comparison that `key` is as read: at `mod_revision`, or absent (`None`).
fn unchanged(key: &str, mod_revision: Option<i64>) -> Compare {
    match mod_revision {
        Some(rev) => Compare::mod_revision(key, CompareOp::Equal, rev),
        None => Compare::create_revision(key, CompareOp::Equal, 0),
    }
}

#[async_trait]
impl WorkerLeases for EtcdAuthority {
    async fn acquire(&self, request: &LeaseRequest) -> Result<WorkerLease, LeaseError> {
        let lock = self.group_lock(&request.group);
        let _turn = tokio::time::timeout(self.config.op_timeout, lock.lock())
            .await
            .map_err(|_| {
                unavailable(format!(
                    "lease group {}: waited longer than {:?} behind earlier acquisitions",
                    request.group, self.config.op_timeout
                ))
            })?;
        let mut granted = None;
        let result = self.acquire_locked(request, &mut granted).await;
        if let Some((id, _)) = granted {
            // Not attached to a committed live key (or the commit is unknown: then the
            // caller was told it failed, and revoking frees the worker id it may have taken).
            self.revoke_quietly(id).await;
        }
        result
    }

    async fn renew(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
    ) -> Result<WorkerLease, LeaseError> {
        let group = &lease.group;
        let what = format!("renewing worker {} of lease group {group}", lease.worker);
        let worker_key = self.worker_key(group, lease.worker);
        let live_key = self.live_key(group, lease.worker);
        let mut backoff = ops::conflict_backoff();
        loop {
            let (record, live) = self.read_worker(group, lease.worker).await?;
            // Superseded: returned before anything is written.
            check_current(lease, record.as_ref().map(|r| &r.slot))?;
            let Some(record) = record else {
                return Err(crate::lease::superseded(lease, None));
            };
            let mut slot = record.slot.clone();
            slot.floor_unix_ms = slot.floor_unix_ms.max(floor_unix_ms);
            let renewed = WorkerLease {
                floor_unix_ms: slot.floor_unix_ms,
                ..lease.clone()
            };
            match live {
                Some(live) => {
                    if slot.floor_unix_ms > record.slot.floor_unix_ms {
                        let txn = Txn::new()
                            .when([
                                unchanged(&worker_key, Some(record.mod_revision)),
                                unchanged(&live_key, Some(live.mod_revision)),
                            ])
                            .and_then([TxnOp::put(worker_key.clone(), encode_record(&slot), None)]);
                        let mut kv = self.kv.clone();
                        if !self.call(&what, kv.txn(txn)).await?.succeeded() {
                            self.lease_conflict(&what, &mut backoff).await?;
                            continue;
                        }
                    }
                    if self.keep_alive_once(live.lease_id).await? {
                        return Ok(renewed);
                    }
                    // The etcd lease ran out after the read: look again (if nobody acquired
                    // the worker id since, the next round grants a new one).
                }
                None => {
                    // The live key expired and nobody acquired the worker id since (the record
                    // still names this lease): the lease is re-established on a new etcd lease,
                    // with a ledger entry, ordered among the group's acquisitions by the group
                    // key's revision as theirs are (the group key is written again).
                    let group_key = self.group_key(group);
                    let Some((group_record, group_rev)) = self.read_group(group).await?.record
                    else {
                        return Err(crate::lease::superseded(lease, None));
                    };
                    let (lease_id, ttl) = self.grant(lease.ttl).await?;
                    let entry = self.audit_key(group, group_rev);
                    let event = AuditEvent::Leased {
                        worker: lease.worker,
                        token: lease.token,
                    };
                    let txn = Txn::new()
                        .when([
                            unchanged(&group_key, Some(group_rev)),
                            unchanged(&worker_key, Some(record.mod_revision)),
                            unchanged(&live_key, None),
                            unchanged(&entry, None),
                        ])
                        .and_then([
                            TxnOp::put(entry, audit_value_by(&event, &lease.holder), None),
                            TxnOp::put(group_key, encode_group(&group_record), None),
                            TxnOp::put(worker_key.clone(), encode_record(&slot), None),
                            TxnOp::put(
                                live_key.clone(),
                                encode_live(lease.token, ttl, &lease.holder),
                                Some(PutOptions::new().with_lease(lease_id)),
                            ),
                        ]);
                    let mut kv = self.kv.clone();
                    match self.call(&what, kv.txn(txn)).await {
                        Ok(response) if response.succeeded() => return Ok(renewed),
                        Ok(_) => {
                            self.revoke_quietly(lease_id).await;
                            self.lease_conflict(&what, &mut backoff).await?;
                        }
                        Err(e) => {
                            self.revoke_quietly(lease_id).await;
                            return Err(e.into());
                        }
                    }
                }
            }
        }
    }

    async fn release(&self, lease: &WorkerLease, floor_unix_ms: u64) -> Result<(), LeaseError> {
        let group = &lease.group;
        let what = format!("releasing worker {} of lease group {group}", lease.worker);
        let worker_key = self.worker_key(group, lease.worker);
        let live_key = self.live_key(group, lease.worker);
        let mut backoff = ops::conflict_backoff();
        loop {
            let (record, live) = self.read_worker(group, lease.worker).await?;
            check_current(lease, record.as_ref().map(|r| &r.slot))?;
            let Some(record) = record else {
                return Err(crate::lease::superseded(lease, None));
            };
            let mut slot = record.slot.clone();
            slot.floor_unix_ms = floor_unix_ms;
            let mut ops = vec![TxnOp::put(worker_key.clone(), encode_record(&slot), None)];
            if live.is_some() {
                ops.push(TxnOp::delete(live_key.clone(), None));
            }
            let txn = Txn::new()
                .when([
                    unchanged(&worker_key, Some(record.mod_revision)),
                    unchanged(&live_key, live.as_ref().map(|l| l.mod_revision)),
                ])
                .and_then(ops);
            let mut kv = self.kv.clone();
            if self.call(&what, kv.txn(txn)).await?.succeeded() {
                if let Some(live) = live {
                    // The live key is gone already: the worker id is free whether or not
                    // this succeeds.
                    self.revoke_quietly(live.lease_id).await;
                }
                return Ok(());
            }
            self.lease_conflict(&what, &mut backoff).await?;
        }
    }

    async fn group(
        &self,
        group: &NamespaceName,
    ) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, LeaseError> {
        let mut read = self.read_group(group).await?;
        let mut expiry = BTreeMap::new();
        for (worker, (_, live)) in read.workers.iter_mut() {
            let Some(known) = live else { continue };
            match self.remaining(known.lease_id).await? {
                Remaining::Left(left) => {
                    expiry.insert(*worker, left);
                }
                // Expired since the read: free.
                Remaining::Gone => *live = None,
            }
        }
        let slots = read.slots(&expiry);
        Ok(read.record.map(|(record, _)| (record, slots)))
    }
}

/// How many audit keys one read of [`AuditLog::subjects`] or [`AuditLog::prune`] returns.
const AUDIT_PAGE: i64 = 500;
/// How many deletes one pruning `Txn` carries (etcd's `--max-txn-ops` is 128 by default).
const PRUNE_BATCH: usize = 64;

impl EtcdAuthority {
    /// `<prefix>audit/<subject>/`.
    fn audit_dir(&self, subject: &NamespaceName) -> String {
        format!("{}{}/", self.audit_prefix, subject.as_str())
    }

    /// The key of the entry whose write is conditioned on revision `after_revision`.
    fn audit_key(&self, subject: &NamespaceName, after_revision: i64) -> String {
        format!("{}{:020}", self.audit_dir(subject), after_revision.max(0))
    }

    /// A range read from `start` (linearizable) with `options` (its end, limit, filters),
    /// sorted by key.
    async fn range(
        &self,
        what: &str,
        start: String,
        options: GetOptions,
    ) -> Result<Vec<KeyValue>, StoreError> {
        let mut response = self
            .call_idempotent(what, |mut kv| {
                let (start, options) = (start.clone(), options.clone());
                async move { kv.get(start, Some(options)).await }
            })
            .await?;
        Ok(response.take_kvs())
    }

    /// The subject and the name (after its directory) of an audit key.
    fn audit_parts<'k>(&self, key: &'k str) -> Result<(NamespaceName, &'k str), StoreError> {
        let corrupt = || StoreError::Corrupt {
            message: format!("etcd key {key:?} is not an audit entry"),
        };
        let (subject, entry) = key
            .strip_prefix(&self.audit_prefix)
            .and_then(|rest| rest.split_once('/'))
            .ok_or_else(corrupt)?;
        let subject = NamespaceName::new(subject).map_err(|_| corrupt())?;
        Ok((subject, entry))
    }

    /// An audit key and value read back, validated: the name is 20 digits, a revision below
    /// the key's create revision (its `seq`), and the value an [`audit::encode_record`] line.
    fn audit_entry(&self, kv: &KeyValue) -> Result<AuditEntry, StoreError> {
        let key = String::from_utf8_lossy(kv.key());
        let (subject, name) = self.audit_parts(&key)?;
        let corrupt = |what: String| StoreError::Corrupt {
            message: format!("etcd audit entry {key:?}: {what}"),
        };
        let after = (name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()))
            .then(|| name.parse::<u64>().ok())
            .flatten()
            .ok_or_else(|| corrupt("its name is not a 20-digit revision".to_owned()))?;
        let seq = u64::try_from(kv.create_revision())
            .ok()
            .filter(|&seq| seq > after)
            .ok_or_else(|| {
                corrupt(format!(
                    "created at revision {}, not after the one it is named after",
                    kv.create_revision()
                ))
            })?;
        audit::decode_record(subject, seq, kv.value()).map_err(corrupt)
    }
}

/// What an audit key holds: the entry in [`audit::encode_record`]'s form, stamped with this
/// process's clock (etcd has none to offer).
fn audit_value(event: &AuditEvent) -> String {
    audit_value_by(event, audit::holder())
}

/// [`audit_value`], granted to `holder` (a worker lease's).
fn audit_value_by(event: &AuditEvent, holder: &str) -> String {
    audit::encode_record(audit::now_unix_ms(), event, holder)
}

/// The key just above every key that starts with `dir` (which ends in `/`): `dir` with the
/// `/` turned into `0`.
fn dir_end(dir: &str) -> String {
    let mut end = dir.strip_suffix('/').unwrap_or(dir).to_owned();
    end.push('0');
    end
}

#[async_trait]
impl AuditLog for EtcdAuthority {
    async fn subjects(&self) -> Result<Vec<NamespaceName>, StoreError> {
        let end = dir_end(&self.audit_prefix);
        let mut start = self.audit_prefix.clone();
        let mut subjects = std::collections::BTreeSet::new();
        loop {
            let page = self
                .range(
                    "listing audit subjects",
                    start,
                    GetOptions::new()
                        .with_range(end.clone())
                        .with_limit(AUDIT_PAGE)
                        .with_keys_only(),
                )
                .await?;
            let mut last = None;
            for kv in &page {
                let key = String::from_utf8_lossy(kv.key());
                let (subject, _) = self.audit_parts(&key)?;
                last = Some(subject.clone());
                subjects.insert(subject);
            }
            match last {
                // Skip the rest of the last subject's entries.
                Some(subject) if page.len() as i64 >= AUDIT_PAGE => {
                    start = dir_end(&self.audit_dir(&subject));
                }
                _ => return Ok(subjects.into_iter().collect()),
            }
        }
    }

    async fn entries(
        &self,
        subject: &NamespaceName,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // An entry is named after its predecessor's seq (the revision its write was
        // conditioned on) and its seq is above its name: so the entries after `after` are
        // those named `after` or above, plus at most one named below `after` if `after` is not
        // the seq of an entry (the one following the last entry at or below `after`).
        let what = format!("reading the audit ledger of {subject}");
        let dir = self.audit_dir(subject);
        let from = format!("{dir}{:020}", after.unwrap_or(0));
        let mut page = self
            .range(
                &what,
                from.clone(),
                GetOptions::new()
                    .with_range(dir_end(&dir))
                    .with_limit(i64::try_from(limit).unwrap_or(i64::MAX)),
            )
            .await?;
        let named_after = |kv: &KeyValue| kv.key().ends_with(&from.as_bytes()[dir.len()..]);
        if let Some(after) = after.filter(|_| !page.first().is_some_and(named_after)) {
            // `after` is no entry's seq, or the last one's: look for the one entry named below
            // it with a seq above it. etcd filters by create revision after reading the
            // whole range, so this costs a read of the subject's older keys; it happens only
            // after a full page that ended the ledger, or with an `after` no entry has.
            let min = i64::try_from(after.saturating_add(1)).unwrap_or(i64::MAX);
            let mut before = self
                .range(
                    &what,
                    dir.clone(),
                    GetOptions::new()
                        .with_range(from.clone())
                        .with_min_create_revision(min),
                )
                .await?;
            before.append(&mut page);
            page = before;
        }
        let mut entries = Vec::with_capacity(page.len());
        for kv in &page {
            let entry = self.audit_entry(kv)?;
            if &entry.subject != subject {
                return Err(StoreError::Corrupt {
                    message: format!(
                        "etcd audit entry {:?} is not of {subject}",
                        String::from_utf8_lossy(kv.key())
                    ),
                });
            }
            if after.is_none_or(|a| entry.seq > a) {
                entries.push(entry);
            }
        }
        // Key order is seq order by construction; sort anyway rather than depend on it.
        entries.sort_by_key(|e| e.seq);
        entries.truncate(limit);
        Ok(entries)
    }

    async fn prune(&self, before_unix_ms: u64) -> Result<u64, StoreError> {
        let end = dir_end(&self.audit_prefix);
        let mut start = self.audit_prefix.clone();
        let mut removed = 0u64;
        loop {
            let page = self
                .range(
                    "reading the audit ledger",
                    start,
                    GetOptions::new()
                        .with_range(end.clone())
                        .with_limit(AUDIT_PAGE),
                )
                .await?;
            let mut old = Vec::new();
            for kv in &page {
                if self.audit_entry(kv)?.at_unix_ms < before_unix_ms {
                    old.push(kv.key().to_vec());
                }
            }
            for batch in old.chunks(PRUNE_BATCH) {
                let txn = Txn::new().and_then(
                    batch
                        .iter()
                        .map(|key| TxnOp::delete(key.clone(), None))
                        .collect::<Vec<_>>(),
                );
                let mut kv = self.kv.clone();
                let response = self.call("pruning the audit ledger", kv.txn(txn)).await?;
                for op in response.op_responses() {
                    if let TxnOpResponse::Delete(deleted) = op {
                        removed += u64::try_from(deleted.deleted()).unwrap_or(0);
                    }
                }
            }
            match page.last() {
                Some(kv) if page.len() as i64 >= AUDIT_PAGE => {
                    // The next key after the last one read.
                    let mut next = kv.key().to_vec();
                    next.push(0);
                    start = String::from_utf8(next).map_err(|_| StoreError::Corrupt {
                        message: "an etcd audit key is not UTF-8".to_owned(),
                    })?;
                }
                _ => return Ok(removed),
            }
        }
    }
}

fn parse_worker(group: &NamespaceName, key: &str, text: &str) -> Result<u64, StoreError> {
    match text.parse::<u64>() {
        Ok(worker) if worker.to_string() == text => Ok(worker),
        _ => Err(StoreError::Corrupt {
            message: format!("etcd key {key:?} of lease group {group} names no worker id"),
        }),
    }
}

fn live_without_record(group: &NamespaceName, worker: u64, token: u64) -> StoreError {
    StoreError::Corrupt {
        message: format!(
            "lease group {group}: the live key of worker {worker} (token {token}) does not \
             match its record"
        ),
    }
}

/// Parses `<format> <key>=<u64> … <last>=<text>`: the numbers of `keys`, then the text after
/// `last=`.
fn lease_fields<'a, const N: usize>(
    text: &'a str,
    format: &str,
    keys: [&str; N],
    last: &str,
) -> Result<([u64; N], &'a str), String> {
    let mut rest = text
        .strip_prefix(format)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or_else(|| {
            format!("does not start with {format:?} (written by another idmint version?)")
        })?;
    let mut numbers = [0u64; N];
    for (key, number) in keys.iter().zip(numbers.iter_mut()) {
        let (field, tail) = rest
            .split_once(' ')
            .ok_or_else(|| format!("field {key} is missing"))?;
        let value = field
            .strip_prefix(key)
            .and_then(|f| f.strip_prefix('='))
            .ok_or_else(|| format!("field {key} is missing or out of place"))?;
        *number = value
            .parse::<u64>()
            .map_err(|_| format!("field {key}={value} is not a number"))?;
        rest = tail;
    }
    let tail = rest
        .strip_prefix(last)
        .and_then(|r| r.strip_prefix('='))
        .ok_or_else(|| format!("field {last} is missing or out of place"))?;
    Ok((numbers, tail))
}

fn lease_text<'a>(
    raw: &'a [u8],
    what: &dyn Fn(String) -> StoreError,
) -> Result<&'a str, StoreError> {
    std::str::from_utf8(raw).map_err(|_| what("not UTF-8 text".to_owned()))
}

fn encode_group(record: &GroupRecord) -> String {
    format!(
        "{GROUP_FORMAT} last_token={} layout={}",
        record.last_token, record.layout
    )
}

fn decode_group(group: &NamespaceName, raw: &[u8]) -> Result<GroupRecord, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        message: format!("etcd record of lease group {group}: {what}"),
    };
    let text = lease_text(raw, &corrupt)?;
    let ([last_token], layout) =
        lease_fields(text, GROUP_FORMAT, ["last_token"], "layout").map_err(corrupt)?;
    let record = GroupRecord {
        layout: layout.to_owned(),
        last_token,
    };
    if encode_group(&record) != text {
        return Err(corrupt(format!("{text:?} is not in canonical form")));
    }
    Ok(record)
}

fn encode_record(slot: &WorkerSlot) -> String {
    format!(
        "{WORKER_FORMAT} token={} floor={} holder={}",
        slot.token, slot.floor_unix_ms, slot.holder
    )
}

fn decode_record(
    group: &NamespaceName,
    worker: u64,
    kv: &KeyValue,
) -> Result<RecordRead, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        message: format!("etcd record of worker {worker} of lease group {group}: {what}"),
    };
    let text = lease_text(kv.value(), &corrupt)?;
    let ([token, floor_unix_ms], holder) =
        lease_fields(text, WORKER_FORMAT, ["token", "floor"], "holder").map_err(corrupt)?;
    let slot = WorkerSlot {
        worker,
        token,
        holder: holder.to_owned(),
        floor_unix_ms,
        expires_in: None,
    };
    if slot.token == 0 {
        return Err(corrupt("token 0 is never granted".to_owned()));
    }
    if encode_record(&slot) != text {
        return Err(corrupt(format!("{text:?} is not in canonical form")));
    }
    Ok(RecordRead {
        slot,
        mod_revision: kv.mod_revision(),
    })
}

fn encode_live(token: u64, ttl: Duration, holder: &str) -> String {
    format!(
        "{LIVE_FORMAT} token={token} ttl={} holder={holder}",
        ttl.as_secs()
    )
}

fn decode_live(group: &NamespaceName, worker: u64, kv: &KeyValue) -> Result<LiveRead, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        message: format!("etcd live key of worker {worker} of lease group {group}: {what}"),
    };
    let text = lease_text(kv.value(), &corrupt)?;
    let ([token, ttl_secs], holder) =
        lease_fields(text, LIVE_FORMAT, ["token", "ttl"], "holder").map_err(corrupt)?;
    if encode_live(token, Duration::from_secs(ttl_secs), holder) != text {
        return Err(corrupt(format!("{text:?} is not in canonical form")));
    }
    if kv.lease() == 0 {
        return Err(corrupt("not attached to an etcd lease".to_owned()));
    }
    Ok(LiveRead {
        token,
        ttl_secs,
        lease_id: kv.lease(),
        mod_revision: kv.mod_revision(),
    })
}

fn decode_incarnation(bytes: &[u8]) -> Result<Incarnation, StoreError> {
    let text = std::str::from_utf8(bytes).unwrap_or("");
    Incarnation::parse(text).map_err(|e| StoreError::Corrupt {
        message: format!("the store's incarnation: {e}"),
    })
}

fn unavailable(message: String) -> StoreError {
    StoreError::Unavailable {
        backend: KIND,
        message,
    }
}

/// A short description of a client error, with its causes (tonic's own messages are terse).
fn describe(e: &etcd_client::Error) -> String {
    let mut message = match e {
        etcd_client::Error::GRpcStatus(status) => {
            format!("{:?}: {}", status.code(), status.message())
        }
        other => other.to_string(),
    };
    let mut source: Option<&(dyn std::error::Error + 'static)> = match e {
        etcd_client::Error::GRpcStatus(status) => std::error::Error::source(status),
        etcd_client::Error::TransportError(t) => std::error::Error::source(t),
        _ => None,
    };
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// `url` without any `user:password@` part.
fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = match rest.split_once('@') {
        Some((_, host)) => host,
        None => rest,
    };
    if scheme.is_empty() {
        rest.to_owned()
    } else {
        format!("{scheme}://{rest}")
    }
}

fn cached(name: &NamespaceName, record: &KeyValue) -> Result<Cached, StoreError> {
    Ok(Cached {
        state: decode(name, record.value())?,
        mod_revision: record.mod_revision(),
    })
}

/// The record returned by the `Else(Get(key))` branch of a transaction that did not succeed.
fn else_record(name: &NamespaceName, response: &TxnResponse) -> Result<Option<Cached>, StoreError> {
    match response.op_responses().first() {
        Some(TxnOpResponse::Get(get)) => match get.kvs().first() {
            Some(record) => cached(name, record).map(Some),
            None => Ok(None),
        },
        _ => Err(unavailable(format!(
            "namespace {name}: etcd answered a transaction without the expected read"
        ))),
    }
}

fn encode(state: &NamespaceState) -> String {
    let spec = &state.spec;
    format!(
        "{FORMAT} bits={} first={} step={} offset={} watermark={}",
        spec.width().bits(),
        spec.first(),
        spec.step(),
        spec.offset(),
        state.watermark
    )
}

fn decode(name: &NamespaceName, raw: &[u8]) -> Result<NamespaceState, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt {
        message: format!("etcd record of namespace {name}: {what}"),
    };
    let text = std::str::from_utf8(raw).map_err(|_| corrupt("not UTF-8 text".to_owned()))?;
    let mut fields = text.split(' ');
    if fields.next() != Some(FORMAT) {
        return Err(corrupt(format!(
            "does not start with {FORMAT:?} (written by another idmint version?)"
        )));
    }
    let mut field = |key: &str| -> Result<u64, StoreError> {
        let value = fields
            .next()
            .and_then(|f| f.strip_prefix(key))
            .and_then(|f| f.strip_prefix('='))
            .ok_or_else(|| corrupt(format!("field {key} is missing or out of place")))?;
        value
            .parse::<u64>()
            .map_err(|_| corrupt(format!("field {key}={value} is not a number")))
    };
    let bits = field("bits")?;
    let (first, step, offset, watermark) = (
        field("first")?,
        field("step")?,
        field("offset")?,
        field("watermark")?,
    );
    if fields.next().is_some() {
        return Err(corrupt("has fields after watermark".to_owned()));
    }
    let width = u32::try_from(bits)
        .ok()
        .and_then(Width::from_bits)
        .ok_or_else(|| corrupt(format!("width {bits} is neither 32 nor 64")))?;
    let state =
        ops::stored_state(name.clone(), width, first, step, offset, watermark).map_err(corrupt)?;
    if encode(&state) != text {
        return Err(corrupt(format!("{text:?} is not in canonical form")));
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn name() -> NamespaceName {
        NamespaceName::new("photos").unwrap()
    }

    #[test]
    fn records_round_trip_and_read_clearly() {
        let specs = [
            SequenceSpec::default_64(),
            SequenceSpec::new(Width::Bits32, 5, 2, 1).unwrap(),
            SequenceSpec::new(Width::Bits64, u64::MAX >> 2, 1000, 999).unwrap(),
        ];
        for spec in specs {
            for watermark in [spec.first(), spec.first() + 17, spec.width().max_id() + 1] {
                let state = NamespaceState {
                    name: name(),
                    spec,
                    watermark,
                };
                assert_eq!(decode(&name(), encode(&state).as_bytes()).unwrap(), state);
            }
        }
        let state = NamespaceState {
            name: name(),
            spec: SequenceSpec::default_64(),
            watermark: 1001,
        };
        assert_eq!(
            encode(&state),
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=1001"
        );
    }

    #[test]
    fn damaged_records_are_corrupt_not_panics() {
        let bad = [
            "",
            "\u{0}\u{1}",
            "idmint.ns/v2 bits=64 first=1 step=1 offset=0 watermark=1",
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0",
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=1 extra=1",
            "idmint.ns/v1 bits=16 first=1 step=1 offset=0 watermark=1",
            "idmint.ns/v1 bits=64 first=1 step=0 offset=0 watermark=1",
            "idmint.ns/v1 bits=64 first=1 step=2 offset=2 watermark=1",
            "idmint.ns/v1 bits=64 step=1 first=1 offset=0 watermark=1",
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=0",
            "idmint.ns/v1 bits=32 first=1 step=1 offset=0 watermark=2147483649",
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=+5",
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=05",
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0  watermark=5",
            "idmint.ns/v1 bits=64 first=1 step=1 offset=0 watermark=99999999999999999999",
        ];
        for raw in bad {
            assert!(
                matches!(
                    decode(&name(), raw.as_bytes()),
                    Err(StoreError::Corrupt { .. })
                ),
                "{raw:?} was accepted"
            );
        }
        let invalid_utf8 = [0xff, 0xfe];
        assert!(matches!(
            decode(&name(), &invalid_utf8),
            Err(StoreError::Corrupt { .. })
        ));
    }

    #[test]
    fn lease_records_round_trip_and_damage_is_corrupt() {
        let record = GroupRecord {
            layout: "timestamp_bits=41 node_bits=2 sequence_bits=12 unit=1ms epoch=0".into(),
            last_token: 7,
        };
        let text = encode_group(&record);
        assert_eq!(
            text,
            "idmint.lease-group/v1 last_token=7 layout=timestamp_bits=41 node_bits=2 \
             sequence_bits=12 unit=1ms epoch=0"
        );
        assert_eq!(decode_group(&name(), text.as_bytes()).unwrap(), record);
        let bad = [
            "",
            "idmint.lease-group/v2 last_token=7 layout=L",
            "idmint.lease-group/v1 last_token=07 layout=L",
            "idmint.lease-group/v1 layout=L",
            "idmint.lease-group/v1 last_token=x layout=L",
        ];
        for raw in bad {
            assert!(
                matches!(
                    decode_group(&name(), raw.as_bytes()),
                    Err(StoreError::Corrupt { .. })
                ),
                "{raw:?} was accepted"
            );
        }
        let slot = WorkerSlot {
            worker: 2,
            token: 7,
            holder: "host a b".into(),
            floor_unix_ms: 1_700_000_005_000,
            expires_in: None,
        };
        assert_eq!(
            encode_record(&slot),
            "idmint.worker/v1 token=7 floor=1700000005000 holder=host a b"
        );
        let text = encode_record(&slot);
        let (numbers, holder) =
            lease_fields(&text, WORKER_FORMAT, ["token", "floor"], "holder").unwrap();
        assert_eq!((numbers, holder), ([7, 1_700_000_005_000], "host a b"));
        assert!(lease_fields(
            "idmint.worker/v1 floor=1 token=7 holder=h",
            WORKER_FORMAT,
            ["token", "floor"],
            "holder"
        )
        .is_err());
        assert_eq!(
            encode_live(7, Duration::from_secs(60), "h"),
            "idmint.live/v1 token=7 ttl=60 holder=h"
        );
        assert!(parse_worker(&name(), "k", "3").is_ok());
        for bad in ["03", "-1", "x", ""] {
            assert!(parse_worker(&name(), "k", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn audit_keys_sort_in_seq_order_and_dirs_end_below_their_neighbours() {
        assert_eq!(dir_end("/idmint/audit/"), "/idmint/audit0");
        assert_eq!(dir_end("/idmint/audit/a/"), "/idmint/audit/a0");
        // Every key of subject `a` sorts below the end of its directory, every key of a
        // subject whose name continues `a` (`a0`, `a:b`; `a.b` and `a-b` sort before) above.
        let end = dir_end("/idmint/audit/a/");
        assert!(format!("/idmint/audit/a/{:020}", i64::MAX).as_str() < end.as_str());
        assert!("/idmint/audit/a/zzz" < end.as_str());
        assert!("/idmint/audit/a0/00000000000000000001" >= end.as_str());
        assert!("/idmint/audit/a:b/00000000000000000001" > end.as_str());
        let (k1, k2) = (format!("{:020}", 99), format!("{:020}", 100));
        assert!(k1 < k2, "zero-padded names sort numerically");
    }

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(
            redact("http://user:secret@10.0.0.1:2379"),
            "http://10.0.0.1:2379"
        );
        assert_eq!(redact("10.0.0.1:2379"), "10.0.0.1:2379");
        assert_eq!(redact("u:p@host:1"), "host:1");
    }

    #[test]
    fn config_defaults() {
        let config = EtcdConfig::new(["http://127.0.0.1:2379"]);
        assert_eq!(config.prefix, "/idmint/");
        assert_eq!(config.op_timeout, Duration::from_secs(5));
        assert_eq!(config.endpoints, vec!["http://127.0.0.1:2379".to_owned()]);
    }
}
