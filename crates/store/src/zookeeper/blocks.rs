//! The namespaces of the ZooKeeper authority: one znode each, created once, moved by a
//! compare-and-swap loop on its version, and the [`Authority`] implementation.
//!
//! ## Operations relied on (ZooKeeper 3.5 or later)
//!
//! - `ensure_namespace`: `create` (persistent); on `NodeExists` the record is read and the specs
//!   compared (`ops::ensure`): created once, the losers of a race see the winner's record.
//! - `reserve` and `give_back`: compare-and-swap on the znode's data version:
//!   `getData` returns the record and its `Stat.version` together, the new state is computed
//!   in Rust (`ops::reserve`, `ops::give_back`) and written with
//!   `setData(path, new, version)` in a `multi` with the audit entry's create (see `audit`), which
//!   ZooKeeper applies only if the version is still the one read. On `BadVersion`
//!   (another node wrote in between) the record is read again and the operation recomputed,
//!   at once for the first few conflicts, then after a random pause (at most 64 ms); after
//!   [`MAX_CONFLICTS`] it gives up with [`StoreError::Unavailable`]. The last written state
//!   and version are cached per namespace, so a reservation is normally one round trip; a
//!   decision that writes nothing (a refused `give_back`, `Exhausted`) is never taken on cached
//!   data.
//! - `advance`, `park` and `claim`: the namespace's parked blocks ([`crate::parks`]) are the
//!   child znode `<root>/namespaces/<name>/parks` ([`Parks::encode`]'s text; absent: none).
//!   The record and the parks are read fresh (both `getData`s at once), the change is decided
//!   in Rust (`ops` and [`Parks`]), and one `multi` writes the record at the version read (or
//!   checks it, when only the parks change), writes the parks at the version read (or creates
//!   the znode), and creates the audit entries (one sequential znode per entry, so a park of
//!   several blocks records each): all of it or nothing. A failed compare goes again from a
//!   read, with the same backoff and bound.
//! - `state`: `getData`; `list`: `getChildren` of `<root>/namespaces` and a `getData` per
//!   child (pipelined). Reads are served by the server the session is connected to, which may
//!   lag the leader (ZooKeeper's sequential consistency, not linearizable reads): a `state` may
//!   be stale, which its contract allows. Every write is a compare-and-swap on a version, so a
//!   stale read costs a conflict, never a duplicate block.
//!
//! Within one `ZookeeperAuthority`, operations on the same namespace run one at a time (an async
//! mutex per namespace); conflicts come only from other processes
//! ([`ZookeeperAuthority::conflicts_retried`] counts them).

use super::record::{decode_incarnation, decode_ns, encode_ns};
use super::session::{
    fail, failed, retry_backoff, retry_pause, timed, transient, unavailable, Deadline, Fail,
};
use super::{ZookeeperAuthority, KIND, MAX_CONFLICTS, PERSISTENT};
use crate::audit::{Advance, Advanced, AuditLog};
use crate::lease::WorkerLeases;
use crate::parks::{self, ClaimKey, Parks};
use crate::{ops, Authority, GiveBack, Incarnation, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use zookeeper_client::{Error as ZkError, MultiWriteError, MultiWriteResult};

/// The cached result of the last write of a namespace by this authority.
#[derive(Debug, Clone)]
pub(super) struct Cached {
    state: NamespaceState,
    version: i32,
}

/// Per namespace: serializes this authority's operations on it and holds its cached record.
pub(super) type Slot = Arc<tokio::sync::Mutex<Option<Cached>>>;

impl ZookeeperAuthority {
    fn ns_path(&self, name: &NamespaceName) -> String {
        format!("{}/{}", self.ns_dir, name.as_str())
    }

    /// `<root>/incarnation`: the store's incarnation ([`crate::incarnation`]).
    fn incarnation_path(&self) -> String {
        format!("{}/incarnation", self.config.root)
    }

    /// The namespace's record and its version, read now.
    async fn read(
        &self,
        name: &NamespaceName,
        deadline: Deadline,
    ) -> Result<Option<Cached>, StoreError> {
        let path = self.ns_path(name);
        let what = format!("reading namespace {name}");
        let mut retries = retry_backoff();
        loop {
            let client = self.client(deadline).await?;
            match timed(deadline, &what, client.get_data(&path)).await? {
                Ok((data, stat)) => {
                    return Ok(Some(Cached {
                        state: decode_ns(name, &data)?,
                        version: stat.version,
                    }))
                }
                Err(ZkError::NoNode) => return Ok(None),
                Err(e) if transient(&e) => retry_pause(deadline, &mut retries).await,
                Err(e) => return Err(failed(&what, &e)),
            }
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

    /// The read-compute-CAS loop of `reserve` and `give_back`.
    async fn update<T>(
        &self,
        name: &NamespaceName,
        decide: impl Fn(&NamespaceState) -> Result<ops::Decision<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let deadline = self.deadline();
        let result = {
            let slot = self.slot(name);
            let outcome = match tokio::time::timeout_at(deadline.0, slot.lock()).await {
                Ok(mut cache) => self.update_locked(name, &mut cache, deadline, decide).await,
                Err(_) => Err(unavailable(format!(
                    "namespace {name}: waited longer than {:?} behind earlier operations",
                    self.config.op_timeout
                ))),
            };
            outcome
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
        deadline: Deadline,
        decide: impl Fn(&NamespaceState) -> Result<ops::Decision<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let unknown = || StoreError::UnknownNamespace { name: name.clone() };
        let path = self.ns_path(name);
        let what = format!("updating namespace {name}");
        // Taken out: an error below leaves the cache empty, so the next call reads afresh.
        let mut current: Option<(Cached, bool)> = cache.take().map(|c| (c, false));
        let mut backoff = ops::conflict_backoff();
        let mut made_dir = false;
        loop {
            let (record, fresh) = match current.take() {
                Some(known) => known,
                None => (self.read(name, deadline).await?.ok_or_else(unknown)?, true),
            };
            let (new_state, event, answer) = match decide(&record.state) {
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
            let client = self.client(deadline).await?;
            let data = encode_ns(&new_state);
            // Operation 0: the compare-and-swap; operation 1: the entry.
            let mut multi = client.new_multi_writer();
            multi
                .add_set_data(&path, data.as_bytes(), Some(record.version))
                .and_then(|()| self.add_audit_entry(&mut multi, name, &event))
                .map_err(|e| failed("building an update", &e))?;
            match timed(deadline, &what, multi.commit()).await? {
                Ok(results) => {
                    let Some(MultiWriteResult::SetData { stat }) = results.first() else {
                        return Err(unavailable(format!(
                            "{what}: ZooKeeper answered a transaction without its results"
                        )));
                    };
                    *cache = Some(Cached {
                        state: new_state,
                        version: stat.version,
                    });
                    return Ok(answer);
                }
                // The subject's audit directory is missing (its first entry, or a store
                // without audit znodes): make it, then go again (nothing was written).
                Err(MultiWriteError::OperationFailed {
                    index: 1,
                    source: ZkError::NoNode,
                }) if !made_dir => {
                    made_dir = true;
                    self.ensure_audit_dir(name, deadline).await?;
                    current = Some((record, fresh));
                    continue;
                }
                // Another writer came first (or the namespace is gone): go again from a read.
                Err(MultiWriteError::OperationFailed {
                    index: 0,
                    source: ZkError::BadVersion | ZkError::NoNode,
                }) => {}
                Err(MultiWriteError::OperationFailed { source, .. })
                | Err(MultiWriteError::RequestFailed { source }) => {
                    return Err(failed(&what, &source))
                }
            }
            self.conflicts.fetch_add(1, Ordering::Relaxed);
            let Some(pause) = backoff.next() else {
                return Err(unavailable(format!(
                    "namespace {name}: gave up after {MAX_CONFLICTS} conflicting writes by \
                     other nodes; retry later"
                )));
            };
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// A namespace's record and parks as read, with the versions the write compares.
struct WithParks {
    record: Cached,
    parks: Parks,
    /// The parks znode's version; `None` when it does not exist (nothing parked yet).
    parks_version: Option<i32>,
}

impl ZookeeperAuthority {
    /// `<root>/namespaces/<name>/parks`: the namespace's parked blocks ([`crate::parks`]).
    fn parks_path(&self, name: &NamespaceName) -> String {
        format!("{}/parks", self.ns_path(name))
    }

    /// The namespace's record and its parks, read now (both `getData`s sent at once; a
    /// record and parks of different moments only cost a failed compare).
    async fn read_with_parks(
        &self,
        name: &NamespaceName,
        deadline: Deadline,
    ) -> Result<Option<WithParks>, StoreError> {
        let (path, parks_path) = (self.ns_path(name), self.parks_path(name));
        let what = format!("reading namespace {name} and its parked blocks");
        let mut retries = retry_backoff();
        loop {
            let client = self.client(deadline).await?;
            let (record, parked) = (client.get_data(&path), client.get_data(&parks_path));
            let record = match timed(deadline, &what, record).await? {
                Ok((data, stat)) => Cached {
                    state: decode_ns(name, &data)?,
                    version: stat.version,
                },
                Err(ZkError::NoNode) => return Ok(None),
                Err(e) if transient(&e) => {
                    retry_pause(deadline, &mut retries).await;
                    continue;
                }
                Err(e) => return Err(failed(&what, &e)),
            };
            let (text, parks_version) = match timed(deadline, &what, parked).await? {
                Ok((data, stat)) => (data, Some(stat.version)),
                Err(ZkError::NoNode) => (Vec::new(), None),
                Err(e) if transient(&e) => {
                    retry_pause(deadline, &mut retries).await;
                    continue;
                }
                Err(e) => return Err(failed(&what, &e)),
            };
            let text = std::str::from_utf8(&text)
                .map_err(|_| parks::corrupt(name, format!("{parks_path} is not UTF-8")))?;
            let parks = Parks::decode(text, record.state.spec.step())
                .map_err(|e| parks::corrupt(name, e))?;
            return Ok(Some(WithParks {
                record,
                parks,
                parks_version,
            }));
        }
    }

    /// The read-decide-compare loop of `advance`, `park` and `claim`, which read and write a
    /// namespace's parks with its record: `decide` maps the state and parks (read fresh on
    /// every try, under the namespace's slot) to the change; one `multi` writes (or checks)
    /// the record at the version read, writes (or creates) the parks znode at the version
    /// read, and creates the audit entries, so all of it lands together or not at all.
    async fn change<T>(
        &self,
        name: &NamespaceName,
        decide: impl Fn(&NamespaceState, &Parks) -> Result<parks::Change<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let deadline = self.deadline();
        let result = {
            let slot = self.slot(name);
            let outcome = match tokio::time::timeout_at(deadline.0, slot.lock()).await {
                Ok(mut cache) => {
                    // An error below leaves the cache empty, so the next `update` reads afresh.
                    cache.take();
                    self.change_locked(name, &mut cache, deadline, decide).await
                }
                Err(_) => Err(unavailable(format!(
                    "namespace {name}: waited longer than {:?} behind earlier operations",
                    self.config.op_timeout
                ))),
            };
            outcome
        };
        if matches!(result, Err(StoreError::UnknownNamespace { .. })) {
            self.forget_slot(name);
        }
        result
    }

    async fn change_locked<T>(
        &self,
        name: &NamespaceName,
        cache: &mut Option<Cached>,
        deadline: Deadline,
        decide: impl Fn(&NamespaceState, &Parks) -> Result<parks::Change<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let unknown = || StoreError::UnknownNamespace { name: name.clone() };
        let (path, parks_path) = (self.ns_path(name), self.parks_path(name));
        let what = format!("updating namespace {name} and its parked blocks");
        let mut backoff = ops::conflict_backoff();
        let mut made_dir = false;
        loop {
            let read = self
                .read_with_parks(name, deadline)
                .await?
                .ok_or_else(unknown)?;
            let state = &read.record.state;
            let change = decide(state, &read.parks)?;
            if change.writes_nothing(state, &read.parks) {
                *cache = Some(read.record);
                return Ok(change.answer);
            }
            let client = self.client(deadline).await?;
            let data = encode_ns(&change.state);
            let text = change.parks.encode();
            // Operation 0: the record (written, or checked when unchanged); operation 1: the
            // parks; then the entries.
            let mut multi = client.new_multi_writer();
            let built = if &change.state == state {
                multi.add_check_version(&path, read.record.version)
            } else {
                multi.add_set_data(&path, data.as_bytes(), Some(read.record.version))
            }
            .and_then(|()| match read.parks_version {
                Some(version) => multi.add_set_data(&parks_path, text.as_bytes(), Some(version)),
                None => multi.add_create(&parks_path, text.as_bytes(), &PERSISTENT),
            })
            .and_then(|()| {
                change
                    .events
                    .iter()
                    .try_for_each(|event| self.add_audit_entry(&mut multi, name, event))
            });
            built.map_err(|e| failed("building an update", &e))?;
            match timed(deadline, &what, multi.commit()).await? {
                Ok(results) => {
                    let version = match results.first() {
                        Some(MultiWriteResult::SetData { stat }) => stat.version,
                        Some(MultiWriteResult::Check) => read.record.version,
                        _ => {
                            return Err(unavailable(format!(
                                "{what}: ZooKeeper answered a transaction without its results"
                            )))
                        }
                    };
                    *cache = Some(Cached {
                        state: change.state,
                        version,
                    });
                    return Ok(change.answer);
                }
                // The subject's audit directory is missing: make it, then go again (nothing
                // was written).
                Err(MultiWriteError::OperationFailed {
                    index,
                    source: ZkError::NoNode,
                }) if index >= 2 && !made_dir => {
                    made_dir = true;
                    self.ensure_audit_dir(name, deadline).await?;
                    continue;
                }
                // Another writer came first (or the namespace is gone): go again from a read.
                Err(MultiWriteError::OperationFailed {
                    index: 0 | 1,
                    source: ZkError::BadVersion | ZkError::NoNode | ZkError::NodeExists,
                }) => {}
                Err(MultiWriteError::OperationFailed { source, .. })
                | Err(MultiWriteError::RequestFailed { source }) => {
                    return Err(failed(&what, &source))
                }
            }
            self.conflicts.fetch_add(1, Ordering::Relaxed);
            let Some(pause) = backoff.next() else {
                return Err(unavailable(format!(
                    "namespace {name}: gave up after {MAX_CONFLICTS} conflicting writes by \
                     other nodes; retry later"
                )));
            };
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    }
}

#[async_trait]
#[async_trait]
impl Authority for ZookeeperAuthority {
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
        let deadline = self.deadline();
        let client = self.client(deadline).await?;
        let path = self.incarnation_path();
        let what = format!("reading {path}");
        match timed(deadline, &what, client.get_data(&path)).await? {
            Ok((data, _)) => decode_incarnation(&data).map(Some),
            Err(ZkError::NoNode) => Ok(None),
            Err(e) => Err(failed(&what, &e)),
        }
    }

    /// One `create` (persistent): `NodeExists` means another node created it first.
    async fn create_incarnation(&self, candidate: &Incarnation) -> Result<Incarnation, StoreError> {
        let deadline = self.deadline();
        let client = self.client(deadline).await?;
        let path = self.incarnation_path();
        let what = format!("creating {path}");
        let created = client.create(&path, candidate.as_str().as_bytes(), &PERSISTENT);
        match timed(deadline, &what, created).await? {
            Ok(_) | Err(ZkError::NodeExists) => {}
            // The root vanished: make it again (the incarnation goes into an empty store).
            Err(ZkError::NoNode) => {
                self.ensure_dirs(deadline).await?;
                let created = client.create(&path, candidate.as_str().as_bytes(), &PERSISTENT);
                match timed(deadline, &what, created).await? {
                    Ok(_) | Err(ZkError::NodeExists) => {}
                    Err(e) => return Err(failed(&what, &e)),
                }
            }
            Err(e) => return Err(failed(&what, &e)),
        }
        self.incarnation()
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                message: format!("{path} is missing right after it was created"),
            })
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
        let deadline = self.deadline();
        let path = self.ns_path(name);
        let created = NamespaceState::new(name.clone(), spec);
        let data = encode_ns(&created);
        let what = format!("creating namespace {name}");
        // Sending the create again is harmless: a second one finds the first's znode and
        // compares specs.
        let mut remade_dirs = false;
        let mut retries = retry_backoff();
        loop {
            let client = self.client(deadline).await?;
            match timed(
                deadline,
                &what,
                client.create(&path, data.as_bytes(), &PERSISTENT),
            )
            .await?
            {
                Ok(_) => return Ok(created),
                Err(ZkError::NodeExists) => break,
                // `<root>/namespaces` is gone (removed by hand): make it again, once.
                Err(ZkError::NoNode) if !remade_dirs => {
                    remade_dirs = true;
                    self.ensure_dirs(deadline).await?;
                }
                Err(e) if transient(&e) => retry_pause(deadline, &mut retries).await,
                Err(e) => return Err(failed(&what, &e)),
            }
        }
        let existing = self.read(name, deadline).await?.ok_or_else(|| {
            unavailable(format!(
                "namespace {name}: ZooKeeper reported the znode both present and absent"
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
        Ok(self.read(name, self.deadline()).await?.map(|c| c.state))
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        let deadline = self.deadline();
        let mut retries = retry_backoff();
        loop {
            match self.list_once(deadline).await {
                Err(Fail::Transient) => retry_pause(deadline, &mut retries).await,
                Err(Fail::Store(e)) => return Err(e),
                Ok(all) => return Ok(all),
            }
        }
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

impl ZookeeperAuthority {
    /// One try of `list`.
    async fn list_once(&self, deadline: Deadline) -> Result<Vec<NamespaceState>, Fail> {
        let client = self.client(deadline).await?;
        let what = "listing namespaces";
        let children = timed(deadline, what, client.list_children(&self.ns_dir))
            .await?
            .map_err(|e| fail(what, e))?;
        let mut reads = Vec::with_capacity(children.len());
        for child in children {
            let name = NamespaceName::new(&child).map_err(|e| StoreError::Corrupt {
                message: format!("znode {}/{child} is not a namespace: {e}", self.ns_dir),
            })?;
            // Sent now, all at once; answered in order.
            let read = client.get_data(&self.ns_path(&name));
            reads.push((name, read));
        }
        let mut all = Vec::with_capacity(reads.len());
        for (name, read) in reads {
            match timed(deadline, what, read).await? {
                Ok((data, _)) => all.push(decode_ns(&name, &data)?),
                Err(ZkError::NoNode) => {}
                Err(e) => return Err(fail(what, e)),
            }
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }
}
