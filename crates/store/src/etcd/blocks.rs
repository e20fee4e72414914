//! The namespaces of the etcd authority: one key each, created once, moved by a
//! compare-and-swap loop, and the [`Authority`] implementation.
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
//!   The `Then` branch also puts the write's audit entry (see `audit`).
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
//! ## The store's incarnation
//!
//! `<prefix>incarnation` holds the store's incarnation ([`crate::incarnation`]), put by a `Txn`
//! conditional on the key never having been created.

use super::audit::audit_value;
use super::conn::unavailable;
use super::record::{decode, decode_incarnation, encode};
use super::request::{self, range_of};
use super::{unchanged, EtcdAuthority, KIND, MAX_CONFLICTS};
use crate::audit::{Advance, Advanced, AuditLog};
use crate::lease::WorkerLeases;
use crate::{ops, Authority, GiveBack, Incarnation, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec};
use idmint_proto::etcd::etcdserverpb::TxnResponse;
use idmint_proto::etcd::mvccpb::KeyValue;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

/// The cached result of the last write of a namespace by this authority.
#[derive(Debug, Clone)]
pub(super) struct Cached {
    state: NamespaceState,
    mod_revision: i64,
}

/// Per namespace: serializes this authority's operations on it and holds its cached record.
pub(super) type Slot = Arc<tokio::sync::Mutex<Option<Cached>>>;

impl EtcdAuthority {
    /// `<prefix>ns/<name>`: the namespace's record.
    fn key(&self, name: &NamespaceName) -> String {
        format!("{}{}", self.ns_prefix, name.as_str())
    }

    /// `<prefix>incarnation`: the store's incarnation ([`crate::incarnation`]).
    fn incarnation_key(&self) -> String {
        format!("{}incarnation", self.config.prefix)
    }

    /// The namespace's record and its `mod_revision`, read now (linearizable).
    async fn read(&self, name: &NamespaceName) -> Result<Option<Cached>, StoreError> {
        let read = request::get(self.key(name));
        let response = self
            .call_idempotent(&format!("reading namespace {name}"), |client| {
                client.range(read.clone())
            })
            .await?;
        match response.kvs.first() {
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
            let txn = request::txn(
                [request::mod_revision_is(key.clone(), record.mod_revision)],
                [
                    request::put(key.clone(), encode(&new_state), 0),
                    request::put(entry, audit_value(&event), 0),
                ],
                [request::get_op(key.clone())],
            );
            let response = self
                .call(&format!("updating namespace {name}"), self.client.txn(txn))
                .await?;
            if response.succeeded {
                // The put's mod_revision is the revision the transaction created.
                *cache = response.header.map(|h| Cached {
                    state: new_state,
                    mod_revision: h.revision,
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
        let read = request::get(self.incarnation_key());
        let response = self
            .call_idempotent("reading the store's incarnation", |client| {
                client.range(read.clone())
            })
            .await?;
        response
            .kvs
            .first()
            .map(|kv| decode_incarnation(&kv.value))
            .transpose()
    }

    /// One `Txn`: put if the key was never created; then the key as it is.
    async fn create_incarnation(&self, candidate: &Incarnation) -> Result<Incarnation, StoreError> {
        let key = self.incarnation_key();
        let txn = request::txn(
            [unchanged(&key, None)],
            [request::put(key.clone(), candidate.as_str(), 0)],
            [],
        );
        self.call("writing the store's incarnation", self.client.txn(txn))
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
        let txn = request::txn(
            [request::create_revision_is(key.clone(), 0)],
            [request::put(key.clone(), encode(&created), 0)],
            [request::get_op(key)],
        );
        // Sending it twice is harmless: the second finds the first's record and compares specs.
        let response = self
            .call_idempotent(&format!("creating namespace {name}"), |client| {
                client.txn(txn.clone())
            })
            .await?;
        if response.succeeded {
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
        let read = request::prefix(self.ns_prefix.clone());
        let response = self
            .call_idempotent("listing namespaces", |client| client.range(read.clone()))
            .await?;
        let mut all = Vec::with_capacity(response.kvs.len());
        for record in &response.kvs {
            let key = String::from_utf8_lossy(&record.key);
            let suffix = key.strip_prefix(&self.ns_prefix).unwrap_or(&key);
            let name = NamespaceName::new(suffix).map_err(|e| StoreError::Corrupt {
                message: format!("etcd key {key:?} is not a namespace: {e}"),
            })?;
            all.push(decode(&name, &record.value)?);
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

fn cached(name: &NamespaceName, record: &KeyValue) -> Result<Cached, StoreError> {
    Ok(Cached {
        state: decode(name, &record.value)?,
        mod_revision: record.mod_revision,
    })
}

/// The record returned by the `Else(Get(key))` branch of a transaction that did not succeed.
fn else_record(name: &NamespaceName, response: &TxnResponse) -> Result<Option<Cached>, StoreError> {
    match response.responses.first().and_then(range_of) {
        Some(get) => match get.kvs.first() {
            Some(record) => cached(name, record).map(Some),
            None => Ok(None),
        },
        None => Err(unavailable(format!(
            "namespace {name}: etcd answered a transaction without the expected read"
        ))),
    }
}
