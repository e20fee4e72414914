//! The namespaces of the Redis authority: one hash each, created once, moved by
//! compare-and-advance scripts, and the [`Authority`] implementation.
//!
//! - `ensure_namespace`: one script creates the hash if absent (and notes the name in the
//!   namespaces set); the losers of a race read the winner's hash and compare specs.
//! - `reserve`, `give_back`: the block (or the refusal) is computed in Rust from the
//!   namespace's state ([`ops`]); one script then writes the new watermark and the audit entry
//!   if, and only if, the stored watermark is still the one the decision was made from. A
//!   refused compare returns the stored watermark, and the operation is computed again from it
//!   at once; after a few conflicts in a row it pauses (random, exponential, at most 64 ms).
//!   After [`ops::MAX_CONFLICTS`] it gives up with [`StoreError::Unavailable`].
//!   The state of the last write is cached per namespace, so a reservation is normally one
//!   round trip (one script, one fsync); a stale cache only costs one conflict. A decision that
//!   writes nothing (a refused `give_back`, `Exhausted`) is never taken on cached data.
//! - With [`RedisConfig::wait_replicas`](super::RedisConfig::wait_replicas), every write is
//!   followed by `WAIT`: fewer replicas than asked is `Unavailable`, and the block is burned.
//! - `advance`, `park`, `claim`: the namespace's parked blocks ([`crate::parks`]) are the
//!   string `{p}:parks:<name>` beside its hash. The state and the parks are read fresh by one
//!   script, the change is decided in Rust (`ops` and [`Parks`]), and one script writes the
//!   watermark, the retired mark, the parks and the audit entries if, and only if, all three
//!   are still as read (a conflict retries with the same backoff). So a park, a claim and the
//!   trimming of the parks by a rebase or a retirement are one atomic write with their entries.
//! - `advance` with [`Advance::Retire`] sets the hash's `retired` field in the script that moves
//!   the watermark past the largest id; every script compares the mark with the watermark, so
//!   no decision made on a live namespace's state is written to a retired one.
//! - `state`: `HGETALL`; `list`: one read script over the namespaces set.
//!
//! Within one `RedisAuthority`, operations on the same namespace run one at a time (an async
//! mutex per namespace), so the tasks of one process do not compete for the compare; conflicts
//! come only from other processes. [`RedisAuthority::conflicts_retried`] counts them.
//!
//! The store's incarnation is `{p}:incarnation`, written by `SET … NX GET`.

use super::record::{self, unexpected};
use super::{unavailable, RedisAuthority, KIND};
use crate::audit::{self, Advance, Advanced, AuditEvent, AuditLog};
use crate::lease::WorkerLeases;
use crate::parks::{self, ClaimKey, Parks};
use crate::{ops, Authority, GiveBack, Incarnation, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec};
use redis::Value;
use std::sync::{Arc, PoisonError};

/// Per namespace: serializes this authority's operations on it and holds the state it last
/// wrote or read.
pub(super) type Slot = Arc<tokio::sync::Mutex<Option<NamespaceState>>>;

/// What the compare-and-advance script answered.
enum Compared {
    /// Written (with its audit entry).
    Written,
    /// The stored watermark or retired mark is another: the stored ones.
    Conflict(u64, bool),
    /// The namespace is gone.
    Missing,
}

/// What the parks script answered.
enum Set {
    /// Written (with its audit entries).
    Written,
    /// The watermark, the retired mark or the parks changed since they were read.
    Changed,
    /// The namespace is gone.
    Missing,
}

impl RedisAuthority {
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

    /// The namespace's state, read now.
    async fn read(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(self.keys.namespace(name));
        let value: Value = self
            .conn
            .query(&format!("reading namespace {name}"), &cmd)
            .await?;
        record::namespace_reply(name, &value)
    }

    /// After a write: `WAIT` for the configured replicas, if any.
    pub(super) async fn replicated(&self, what: &str) -> Result<(), StoreError> {
        let wanted = self.config.wait_replicas;
        if wanted == 0 {
            return Ok(());
        }
        let timeout_ms = u64::try_from(self.config.wait_timeout.as_millis()).unwrap_or(u64::MAX);
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(wanted).arg(timeout_ms);
        let acked: u64 = self.conn.query(what, &cmd).await?;
        if acked < u64::from(wanted) {
            return Err(unavailable(format!(
                "{what}: written on the primary, but only {acked} of {wanted} replicas \
                 acknowledged it within {:?}; what it granted is not handed out",
                self.config.wait_timeout
            )));
        }
        Ok(())
    }

    /// The read-compute-compare loop of `reserve`, `give_back` and `advance`.
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
        cache: &mut Option<NamespaceState>,
        decide: impl Fn(&NamespaceState) -> Result<ops::Decision<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let unknown = || StoreError::UnknownNamespace { name: name.clone() };
        // Taken out: an error below leaves the cache empty, so the next call reads afresh.
        let mut current: Option<(NamespaceState, bool)> = cache.take().map(|c| (c, false));
        let mut backoff = ops::conflict_backoff();
        loop {
            let (state, fresh) = match current.take() {
                Some(known) => known,
                None => (self.read(name).await?.ok_or_else(unknown)?, true),
            };
            let (next, event, answer) = match decide(&state) {
                // Only write decisions may rest on cached data (the script compares them).
                Ok(ops::Decision::Keep(_)) | Err(_) if !fresh => continue,
                Err(e) => {
                    *cache = Some(state);
                    return Err(e);
                }
                Ok(ops::Decision::Keep(answer)) => {
                    *cache = Some(state);
                    return Ok(answer);
                }
                Ok(ops::Decision::Write(next, event, answer)) => (next, event, answer),
            };
            let what = format!("updating namespace {name}");
            match self.advance_script(&what, &state, &next, &event).await? {
                Compared::Written => {
                    *cache = Some(next);
                    self.replicated(&what).await?;
                    return Ok(answer);
                }
                Compared::Missing => return Err(unknown()),
                Compared::Conflict(stored, retired) => {
                    self.conflict();
                    let Some(pause) = backoff.next() else {
                        return Err(unavailable(format!(
                            "namespace {name}: gave up after {} conflicting writes by other \
                             nodes; retry later",
                            ops::MAX_CONFLICTS
                        )));
                    };
                    if pause.is_zero() {
                        // The stored watermark is as fresh as data gets; the spec never changes.
                        let mut fresh = state;
                        fresh.watermark = stored;
                        fresh.retired = retired;
                        current = Some((fresh, true));
                    } else {
                        tokio::time::sleep(pause).await;
                        current = None;
                    }
                }
            }
        }
    }

    /// The read-decide-compare loop of `advance`, `park` and `claim`, which read and write a
    /// namespace's parks with its record: `decide` maps the state and parks (read fresh on
    /// every try, under the namespace's slot) to the change; one script writes the record,
    /// the parks and the audit entries if, and only if, all three are still as read.
    async fn change<T>(
        &self,
        name: &NamespaceName,
        decide: impl Fn(&NamespaceState, &Parks) -> Result<parks::Change<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let result = {
            let slot = self.slot(name);
            let waited = tokio::time::timeout(self.config.op_timeout, slot.lock()).await;
            match waited {
                Ok(mut cache) => self.change_locked(name, &mut cache, decide).await,
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

    async fn change_locked<T>(
        &self,
        name: &NamespaceName,
        cache: &mut Option<NamespaceState>,
        decide: impl Fn(&NamespaceState, &Parks) -> Result<parks::Change<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let unknown = || StoreError::UnknownNamespace { name: name.clone() };
        // An error below leaves the cache empty, so the next `update` reads afresh.
        *cache = None;
        let mut backoff = ops::conflict_backoff();
        loop {
            let (state, parks) = self.read_with_parks(name).await?.ok_or_else(unknown)?;
            let change = decide(&state, &parks)?;
            if change.writes_nothing(&state, &parks) {
                *cache = Some(state);
                return Ok(change.answer);
            }
            let what = format!("updating namespace {name} and its parked blocks");
            match self.parks_script(&what, &state, &parks, &change).await? {
                Set::Written => {
                    *cache = Some(change.state);
                    self.replicated(&what).await?;
                    return Ok(change.answer);
                }
                Set::Missing => return Err(unknown()),
                Set::Changed => {
                    self.conflict();
                    let Some(pause) = backoff.next() else {
                        return Err(unavailable(format!(
                            "namespace {name}: gave up after {} conflicting writes by other \
                             nodes; retry later",
                            ops::MAX_CONFLICTS
                        )));
                    };
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// The namespace's state and parks, read now by one script.
    async fn read_with_parks(
        &self,
        name: &NamespaceName,
    ) -> Result<Option<(NamespaceState, Parks)>, StoreError> {
        let what = format!("reading namespace {name} and its parked blocks");
        let mut call = self.scripts.namespace.prepare_invoke();
        call.key(self.keys.namespace(name))
            .key(self.keys.parks(name));
        let reply: Value = self.conn.script(&what, &call).await?;
        let items = record::items(&reply).unwrap_or_default();
        let [fields, text] = items else {
            return Err(unexpected(&what, &reply));
        };
        let Some(state) = record::namespace_reply(name, fields)? else {
            return Ok(None);
        };
        let text = record::text(text).ok_or_else(|| unexpected(&what, &reply))?;
        let parks = Parks::decode(&text, state.spec.step()).map_err(|e| parks::corrupt(name, e))?;
        Ok(Some((state, parks)))
    }

    /// Runs the parks script: from `state` and `parks` to `change`, recording its entries.
    async fn parks_script<T>(
        &self,
        what: &str,
        state: &NamespaceState,
        parks: &Parks,
        change: &parks::Change<T>,
    ) -> Result<Set, StoreError> {
        let name = &state.name;
        let mut call = self.scripts.parks.prepare_invoke();
        call.key(self.keys.namespace(name))
            .key(self.keys.parks(name))
            .key(self.keys.audit_seq())
            .key(self.keys.audit(name))
            .key(self.keys.audit_subjects())
            .arg(state.watermark.to_string())
            .arg(record::retired_mark(state.retired))
            .arg(parks.encode())
            .arg(change.state.watermark.to_string())
            .arg(record::retired_mark(change.state.retired))
            .arg(change.parks.encode())
            .arg(audit::holder())
            .arg(name.as_str());
        for event in &change.events {
            let (a, b) = event.numbers();
            call.arg(event.name()).arg(a.to_string()).arg(b.to_string());
        }
        let reply: Value = self.conn.script(what, &call).await?;
        let items = record::items(&reply).unwrap_or_default();
        match items.first().and_then(record::int) {
            Some(0) => Ok(Set::Missing),
            Some(1) => Ok(Set::Changed),
            Some(2) => Ok(Set::Written),
            _ => Err(unexpected(what, &reply)),
        }
    }

    /// Runs the compare-and-advance script: `from`'s watermark to `to`'s, recording `event`.
    async fn advance_script(
        &self,
        what: &str,
        from: &NamespaceState,
        to: &NamespaceState,
        event: &AuditEvent,
    ) -> Result<Compared, StoreError> {
        let name = &from.name;
        let (a, b) = event.numbers();
        let mut call = self.scripts.advance.prepare_invoke();
        call.key(self.keys.namespace(name))
            .key(self.keys.audit_seq())
            .key(self.keys.audit(name))
            .key(self.keys.audit_subjects())
            .arg(from.watermark.to_string())
            .arg(to.watermark.to_string())
            .arg(event.name())
            .arg(a.to_string())
            .arg(b.to_string())
            .arg(audit::holder())
            .arg(name.as_str())
            .arg(record::retired_mark(from.retired))
            .arg(record::retired_mark(to.retired));
        let reply: Value = self.conn.script(what, &call).await?;
        let items = record::items(&reply).unwrap_or_default();
        match (items.first().and_then(record::int), items.get(1)) {
            (Some(0), None) => Ok(Compared::Missing),
            (Some(1), Some(stored)) => {
                let stored = record::text(stored)
                    .and_then(|t| record::number(&t))
                    .ok_or_else(|| unexpected(what, &reply))?;
                let retired = match items.get(2).and_then(record::text).as_deref() {
                    Some("") => false,
                    Some("1") => true,
                    _ => return Err(unexpected(what, &reply)),
                };
                Ok(Compared::Conflict(stored, retired))
            }
            (Some(2), Some(_)) => Ok(Compared::Written),
            _ => Err(unexpected(what, &reply)),
        }
    }
}

#[async_trait]
impl Authority for RedisAuthority {
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
        let mut cmd = redis::cmd("GET");
        cmd.arg(self.keys.incarnation());
        let text: Option<String> = self
            .conn
            .query("reading the store's incarnation", &cmd)
            .await?;
        text.as_deref().map(record::incarnation).transpose()
    }

    /// `SET key candidate NX GET`: written if absent; the one it holds otherwise.
    async fn create_incarnation(&self, candidate: &Incarnation) -> Result<Incarnation, StoreError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.keys.incarnation())
            .arg(candidate.as_str())
            .arg("NX")
            .arg("GET");
        let what = "writing the store's incarnation";
        let before: Option<String> = self.conn.query(what, &cmd).await?;
        match before {
            None => {
                self.replicated(what).await?;
                Ok(candidate.clone())
            }
            Some(existing) => record::incarnation(&existing),
        }
    }

    async fn advance(
        &self,
        name: &NamespaceName,
        to: u64,
        why: Advance,
    ) -> Result<Advanced, StoreError> {
        self.change(name, |state, parks| {
            parks::decide_advance(state, parks, to, why)
        })
        .await
    }

    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let created = NamespaceState::new(name.clone(), spec);
        let what = format!("creating namespace {name}");
        let mut call = self.scripts.ensure.prepare_invoke();
        call.key(self.keys.namespace(name))
            .key(self.keys.namespaces());
        for field in record::namespace_fields(&created) {
            call.arg(field);
        }
        call.arg(name.as_str());
        let reply: Value = self.conn.script(&what, &call).await?;
        let items = record::items(&reply).unwrap_or_default();
        match (items.first().and_then(record::int), items.get(1)) {
            (Some(1), None) => {
                self.replicated(&what).await?;
                Ok(created)
            }
            (Some(0), Some(fields)) => {
                let existing = record::namespace_reply(name, fields)?
                    .ok_or_else(|| unexpected(&what, &reply))?;
                match ops::ensure(name, Some(&existing), spec)? {
                    None => Ok(existing),
                    // ops::ensure only creates when nothing exists.
                    Some(_) => Err(unexpected(&what, &reply)),
                }
            }
            _ => Err(unexpected(&what, &reply)),
        }
    }

    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        self.update(name, |state| ops::decide_reserve(state, count))
            .await
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        self.read(name).await
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        let what = "listing namespaces";
        let mut call = self.scripts.list.prepare_invoke();
        call.key(self.keys.namespaces())
            .arg(self.keys.namespace_prefix());
        let reply: Value = self.conn.script(what, &call).await?;
        let items = record::items(&reply).ok_or_else(|| unexpected(what, &reply))?;
        let mut all = Vec::with_capacity(items.len() / 2);
        for pair in items.chunks(2) {
            let [name, fields] = pair else {
                return Err(unexpected(what, &reply));
            };
            let text = record::text(name).ok_or_else(|| unexpected(what, &reply))?;
            let name = NamespaceName::new(&text).map_err(|e| {
                record::corrupt(format!(
                    "the namespaces set names {text:?}, which is not a namespace: {e}"
                ))
            })?;
            let state = record::namespace_reply(&name, fields)?.ok_or_else(|| {
                record::corrupt(format!(
                    "the namespaces set names {name}, whose record is missing"
                ))
            })?;
            all.push(state);
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        self.update(name, |state| ops::decide_give_back(state, tail))
            .await
    }

    async fn park(
        &self,
        name: &NamespaceName,
        key: &ClaimKey,
        blocks: &[Block],
    ) -> Result<(), StoreError> {
        self.change(name, |state, parks| {
            parks::decide_park(state, parks, key, blocks)
        })
        .await
    }

    async fn claim(&self, name: &NamespaceName, key: &ClaimKey) -> Result<Vec<Block>, StoreError> {
        self.change(name, |state, parks| parks::decide_claim(state, parks, key))
            .await
    }
}
