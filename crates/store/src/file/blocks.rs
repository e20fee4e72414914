//! The namespaces of the file authority: every `ensure_namespace`, `reserve`, `give_back`,
//! `advance`, `park` and `claim` is one redb write transaction on the namespace's record and
//! its parks (with its audit entries), committed with fsync before the call returns; and the
//! [`Authority`] implementation.

use super::audit::append_entry;
use super::record::{decode, decode_incarnation, encode, INCARNATION_KEY, META, NAMESPACES, PARKS};
use super::{begin_durable, redb_error, FileAuthority, KIND};
use crate::audit::{Advance, Advanced, AuditEvent, AuditLog};
use crate::lease::WorkerLeases;
use crate::parks::{self, ClaimKey, Parks};
use crate::{ops, Authority, GiveBack, Incarnation, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec};
use redb::{Durability, ReadableDatabase, ReadableTable};

/// What one write transaction of [`FileAuthority::change`] writes and answers.
struct Change<T> {
    /// The namespace's record to write, if it changes.
    state: Option<NamespaceState>,
    /// The namespace's parks to write, if they change.
    parks: Option<Parks>,
    /// The audit entries recording the change.
    events: Vec<AuditEvent>,
    /// The answer.
    out: T,
}

impl FileAuthority {
    /// One write transaction on `name`'s record and parks: `op` gets the current state and
    /// parks and returns what to write, the audit entries recording it and the result. Commits
    /// with fsync before returning; an `Err` of `op` writes nothing.
    async fn change<T, F>(&self, name: &NamespaceName, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Option<NamespaceState>, Parks) -> Result<Change<T>, StoreError> + Send + 'static,
    {
        let name = name.clone();
        self.blocking(move |db| {
            let mut txn = db.begin_write().map_err(redb_error)?;
            txn.set_durability(Durability::Immediate)
                .map_err(redb_error)?;
            let out = {
                let mut table = txn.open_table(NAMESPACES).map_err(redb_error)?;
                let mut parked = txn.open_table(PARKS).map_err(redb_error)?;
                let current = match table.get(name.as_str()).map_err(redb_error)? {
                    Some(value) => Some(decode(name.as_str(), value.value())?),
                    None => None,
                };
                let parks = match (&current, parked.get(name.as_str()).map_err(redb_error)?) {
                    (Some(state), Some(text)) => Parks::decode(text.value(), state.spec.step())
                        .map_err(|e| parks::corrupt(&name, e))?,
                    _ => Parks::none(),
                };
                let change = op(current, parks)?;
                if let Some(state) = change.state {
                    table
                        .insert(name.as_str(), encode(&state).as_slice())
                        .map_err(redb_error)?;
                }
                match change.parks {
                    Some(p) if p.is_empty() => {
                        parked.remove(name.as_str()).map_err(redb_error)?;
                    }
                    Some(p) => {
                        parked
                            .insert(name.as_str(), p.encode().as_str())
                            .map_err(redb_error)?;
                    }
                    None => {}
                }
                for event in &change.events {
                    append_entry(&txn, name.as_str(), event)?;
                }
                change.out
            };
            // Dropping an uncommitted transaction (the `?`s above) aborts it: nothing changes.
            txn.commit().map_err(redb_error)?;
            Ok(out)
        })
        .await
    }

    /// [`FileAuthority::change`] of the record alone: `op` gets the current state and returns
    /// the state to write (if any), the audit entry recording it (if any) and the result.
    async fn update<T, F>(&self, name: &NamespaceName, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(
                Option<NamespaceState>,
            )
                -> Result<(Option<NamespaceState>, Option<AuditEvent>, T), StoreError>
            + Send
            + 'static,
    {
        self.change(name, move |current, _| {
            let (state, event, out) = op(current)?;
            Ok(Change {
                state,
                parks: None,
                events: event.into_iter().collect(),
                out,
            })
        })
        .await
    }
}

#[async_trait]
#[async_trait]
impl Authority for FileAuthority {
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
        self.blocking(|db| {
            let txn = db.begin_read().map_err(redb_error)?;
            let table = txn.open_table(META).map_err(redb_error)?;
            let value = table.get(INCARNATION_KEY).map_err(redb_error)?;
            value.map(|v| decode_incarnation(v.value())).transpose()
        })
        .await
    }

    async fn create_incarnation(&self, candidate: &Incarnation) -> Result<Incarnation, StoreError> {
        let candidate = candidate.clone();
        self.blocking(move |db| {
            let txn = begin_durable(db)?;
            let held = {
                let mut table = txn.open_table(META).map_err(redb_error)?;
                let existing = table
                    .get(INCARNATION_KEY)
                    .map_err(redb_error)?
                    .map(|v| decode_incarnation(v.value()))
                    .transpose()?;
                match existing {
                    Some(held) => held,
                    None => {
                        table
                            .insert(INCARNATION_KEY, candidate.as_str())
                            .map_err(redb_error)?;
                        candidate
                    }
                }
            };
            txn.commit().map_err(redb_error)?;
            Ok(held)
        })
        .await
    }

    async fn advance(
        &self,
        name: &NamespaceName,
        to: u64,
        why: Advance,
    ) -> Result<Advanced, StoreError> {
        let key = name.clone();
        self.change(name, move |current, parks| {
            let state = current.ok_or(StoreError::UnknownNamespace { name: key })?;
            let from = state.watermark;
            let (write, events, state) = match ops::advance(&state, to, why)? {
                Some(next) => {
                    let event = ops::advance_event(why, from, next.watermark);
                    (Some(next.clone()), vec![event], next)
                }
                None => (None, Vec::new(), state),
            };
            let trimmed = parks.after_advance(&state, to);
            Ok(Change {
                state: write,
                parks: (trimmed != parks).then_some(trimmed),
                events,
                out: Advanced { from, state },
            })
        })
        .await
    }

    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let key = name.clone();
        self.update(name, move |current| {
            match ops::ensure(&key, current.as_ref(), spec)? {
                Some(created) => Ok((Some(created.clone()), None, created)),
                None => match current {
                    Some(state) => Ok((None, None, state)),
                    None => Err(StoreError::UnknownNamespace { name: key }),
                },
            }
        })
        .await
    }

    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        let key = name.clone();
        self.update(name, move |current| {
            let mut state = current.ok_or(StoreError::UnknownNamespace { name: key })?;
            let block = ops::reserve(&state, count)?;
            state.watermark = block.end();
            Ok((
                Some(state),
                Some(AuditEvent::Granted {
                    start: block.start(),
                    end: block.end(),
                }),
                Reservation {
                    block,
                    watermark: block.end(),
                },
            ))
        })
        .await
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        let name = name.clone();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(redb_error)?;
            let table = txn.open_table(NAMESPACES).map_err(redb_error)?;
            match table.get(name.as_str()).map_err(redb_error)? {
                Some(value) => decode(name.as_str(), value.value()).map(Some),
                None => Ok(None),
            }
        })
        .await
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        self.blocking(|db| {
            let txn = db.begin_read().map_err(redb_error)?;
            let table = txn.open_table(NAMESPACES).map_err(redb_error)?;
            let mut all = Vec::new();
            for entry in table.iter().map_err(redb_error)? {
                let (key, value) = entry.map_err(redb_error)?;
                all.push(decode(key.value(), value.value())?);
            }
            // redb iterates in key order already; sorting again costs nothing and does not
            // depend on how redb orders strings.
            all.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(all)
        })
        .await
    }

    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        let key = name.clone();
        self.update(name, move |current| {
            let mut state = current.ok_or(StoreError::UnknownNamespace { name: key })?;
            match ops::give_back(&state, tail)? {
                Ok(watermark) => {
                    state.watermark = watermark;
                    let event = AuditEvent::GivenBack {
                        start: tail.start(),
                        end: tail.end(),
                    };
                    Ok((Some(state), Some(event), GiveBack::Returned))
                }
                Err(refused) => Ok((None, None, refused)),
            }
        })
        .await
    }

    async fn park(
        &self,
        name: &NamespaceName,
        key: &ClaimKey,
        blocks: &[Block],
    ) -> Result<(), StoreError> {
        let (id, key, blocks) = (name.clone(), key.clone(), blocks.to_vec());
        self.change(name, move |current, parks| {
            let state = current.ok_or(StoreError::UnknownNamespace { name: id })?;
            let next = parks.park(&state, &key, &blocks)?;
            Ok(Change {
                state: None,
                parks: Some(next),
                events: parks::events(&blocks, false),
                out: (),
            })
        })
        .await
    }

    async fn claim(&self, name: &NamespaceName, key: &ClaimKey) -> Result<Vec<Block>, StoreError> {
        let (id, key) = (name.clone(), key.clone());
        self.change(name, move |current, parks| {
            let state = current.ok_or(StoreError::UnknownNamespace { name: id })?;
            let (next, blocks) = parks.claim(&state, &key)?;
            Ok(Change {
                state: None,
                parks: Some(next),
                events: parks::events(&blocks, true),
                out: blocks,
            })
        })
        .await
    }
}
