//! Worker leases of the file authority ([`WorkerLeases`] for [`FileAuthority`]): records in
//! the file, liveness in memory.
//!
//! [`WorkerLeases`] keeps two more tables, written by the same kind of transaction (one redb
//! write transaction per `acquire`, `renew` and `release`, committed with
//! [`redb::Durability::Immediate`] before the call returns, the decision taken inside it by
//! [`plan_acquire`]):
//!
//! - `idmint.lease_groups.v1`, keyed by the group name: version `1` (1 byte), `last_token`
//!   (u64 big-endian), then the recorded layout (UTF-8, the rest of the value);
//! - `idmint.worker_leases.v1`, keyed by `(group, worker id)`: version `1`, the token and the
//!   time floor (u64 big-endian each), then the latest holder (UTF-8, the rest).
//!
//! Expiry is **not** on disk: whether a lease is live is kept in memory, as the token it was
//! granted with and its expiry on the authority's monotonic clock (the operating system's, or
//! the one given to [`FileAuthority::open_with_clock`]). So every lease recorded in the file
//! when it is opened is expired. That is safe, and exact: redb's lock gives the directory to
//! one process at a time, so a lease found at open was granted by a process that no longer
//! holds the directory (it exited or crashed) and cannot issue under it through this store;
//! and what protects the ids that process issued is not the lease but the durable time floor
//! and the token, which the file keeps and the next holder starts from (a larger token, at or
//! above the floor).

use super::audit::append_entry_by;
use super::record::{
    decode_group, decode_worker, encode_group, encode_worker, LEASE_GROUPS, WORKER_LEASES,
};
use super::{begin_durable, redb_error, unavailable, FileAuthority};
use crate::audit::AuditEvent;
use crate::lease::{
    check_current, plan_acquire, GroupRecord, LeaseError, LeaseRequest, WorkerLease, WorkerLeases,
    WorkerSlot,
};
use crate::StoreError;
use async_trait::async_trait;
use idmint_core::{Clock, NamespaceName};
use redb::{Database, ReadableDatabase, ReadableTable};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Which leases are live, in memory only (see the module docs: none survives the process).
pub(super) struct Liveness {
    clock: Arc<dyn Clock>,
    /// Per `(group, worker id)`: the token of its live lease and when it expires (monotonic
    /// nanos of `clock`). A slot is live only if this token is its recorded one.
    ///
    /// A `std::sync::Mutex`: taken inside a blocking lease transaction, after redb's write
    /// lock (so writers change it one at a time, in the order of their commits), and held
    /// until the commit is done, so no other writer sees a lease before it is durable or after
    /// it ended; never across an `.await`.
    live: Mutex<LiveMap>,
}

type LiveMap = HashMap<(NamespaceName, u64), (u64, u64)>;

impl Liveness {
    /// No lease live: every lease in the file belongs to a process that is gone (module docs).
    pub(super) fn new(clock: Arc<dyn Clock>) -> Self {
        Liveness {
            clock,
            live: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LiveMap> {
        // Every change is one insert or remove: consistent even after a panic.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl FileAuthority {
    /// Runs a lease operation on the blocking pool with the liveness table; see
    /// [`Self::blocking`].
    async fn lease_op<T, F>(&self, op: F) -> Result<T, LeaseError>
    where
        T: Send + 'static,
        F: FnOnce(&Database, &Liveness) -> Result<T, LeaseError> + Send + 'static,
    {
        let db = self.db.clone();
        let leases = self.leases.clone();
        match tokio::task::spawn_blocking(move || op(&db, &leases)).await {
            Ok(result) => result,
            Err(e) => Err(unavailable(format!("file store lease operation failed: {e}")).into()),
        }
    }
}

impl FileAuthority {
    /// Deletes lease group `group`'s records (its group record and worker records) and nothing
    /// else, as a mistaken operator would: the conformance suite's
    /// `a_deleted_group_is_never_created_again`. Blocks.
    #[cfg(feature = "conformance")]
    #[doc(hidden)]
    pub fn delete_lease_group_records(&self, group: &NamespaceName) -> Result<(), StoreError> {
        let name = group.as_str();
        let txn = begin_durable(&self.db)?;
        {
            let mut groups = txn.open_table(LEASE_GROUPS).map_err(redb_error)?;
            groups.remove(name).map_err(redb_error)?;
            let mut workers = txn.open_table(WORKER_LEASES).map_err(redb_error)?;
            let ids: Vec<u64> = workers
                .range((name, 0)..=(name, u64::MAX))
                .map_err(redb_error)?
                .map(|item| item.map(|(key, _)| key.value().1))
                .collect::<Result<_, _>>()
                .map_err(redb_error)?;
            for id in ids {
                workers.remove((name, id)).map_err(redb_error)?;
            }
        }
        txn.commit().map_err(redb_error)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The recorded worker ids of `group`, sorted, all marked free.
fn read_slots(
    table: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    group: &str,
) -> Result<Vec<WorkerSlot>, StoreError> {
    let mut slots = Vec::new();
    for entry in table
        .range((group, 0u64)..=(group, u64::MAX))
        .map_err(redb_error)?
    {
        let (key, value) = entry.map_err(redb_error)?;
        let (_, worker) = key.value();
        slots.push(decode_worker(group, worker, value.value())?);
    }
    Ok(slots)
}

/// Marks the slots of `group` live whose lease is live at `now` by `live`.
fn mark_live(slots: &mut [WorkerSlot], group: &NamespaceName, live: &LiveMap, now: u64) {
    for slot in slots {
        slot.expires_in = live
            .get(&(group.clone(), slot.worker))
            .filter(|(token, at)| *token == slot.token && *at > now)
            .map(|(_, at)| Duration::from_nanos(at - now));
    }
}

fn read_group(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    group: &str,
) -> Result<Option<GroupRecord>, StoreError> {
    match table.get(group).map_err(redb_error)? {
        Some(value) => decode_group(group, value.value()).map(Some),
        None => Ok(None),
    }
}

/// The record of one worker id, free.
fn read_slot(
    table: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    group: &str,
    worker: u64,
) -> Result<Option<WorkerSlot>, StoreError> {
    match table.get((group, worker)).map_err(redb_error)? {
        Some(value) => decode_worker(group, worker, value.value()).map(Some),
        None => Ok(None),
    }
}

#[async_trait]
#[async_trait]
impl WorkerLeases for FileAuthority {
    async fn acquire(&self, request: &LeaseRequest) -> Result<WorkerLease, LeaseError> {
        let request = request.clone();
        self.lease_op(move |db, leases| {
            let txn = begin_durable(db)?;
            // Taken after redb's write lock, held to the commit (see `Liveness::live`).
            let mut live = leases.lock();
            let now = leases.clock.monotonic_nanos();
            let name = request.group.as_str();
            let grant = {
                let mut groups = txn.open_table(LEASE_GROUPS).map_err(redb_error)?;
                let mut workers = txn.open_table(WORKER_LEASES).map_err(redb_error)?;
                let record = read_group(&groups, name)?;
                if record.is_none() && super::audit::shows_group(&txn, name)? {
                    return Err(crate::lease::lost_group(&request.group, "file"));
                }
                let mut slots = read_slots(&workers, name)?;
                mark_live(&mut slots, &request.group, &live, now);
                let grant = plan_acquire(&request, record.as_ref(), &slots)?;
                groups
                    .insert(name, encode_group(&grant.group).as_slice())
                    .map_err(redb_error)?;
                let slot = WorkerSlot {
                    worker: grant.worker,
                    token: grant.token,
                    holder: request.holder.clone(),
                    floor_unix_ms: grant.floor_unix_ms,
                    expires_in: None,
                };
                workers
                    .insert((name, grant.worker), encode_worker(&slot).as_slice())
                    .map_err(redb_error)?;
                grant
            };
            let event = AuditEvent::Leased {
                worker: grant.worker,
                token: grant.token,
            };
            append_entry_by(&txn, name, &event, &request.holder)?;
            // Dropping an uncommitted transaction (the `?`s above) aborts it: nothing changes.
            txn.commit().map_err(redb_error)?;
            live.insert(
                (request.group.clone(), grant.worker),
                (grant.token, now.saturating_add(nanos(request.ttl))),
            );
            Ok(WorkerLease {
                group: request.group.clone(),
                worker: grant.worker,
                token: grant.token,
                floor_unix_ms: grant.floor_unix_ms,
                ttl: request.ttl,
                holder: request.holder,
            })
        })
        .await
    }

    async fn renew(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
    ) -> Result<WorkerLease, LeaseError> {
        let lease = lease.clone();
        self.lease_op(move |db, leases| {
            let txn = begin_durable(db)?;
            let mut live = leases.lock();
            let now = leases.clock.monotonic_nanos();
            let name = lease.group.as_str();
            let floor = {
                let mut workers = txn.open_table(WORKER_LEASES).map_err(redb_error)?;
                let slot = read_slot(&workers, name, lease.worker)?;
                // Superseded: returned before any write, the transaction aborts.
                check_current(&lease, slot.as_ref())?;
                let mut slot = slot.ok_or_else(|| unavailable("lease record vanished".into()))?;
                if floor_unix_ms > slot.floor_unix_ms {
                    slot.floor_unix_ms = floor_unix_ms;
                    workers
                        .insert((name, lease.worker), encode_worker(&slot).as_slice())
                        .map_err(redb_error)?;
                }
                slot.floor_unix_ms
            };
            txn.commit().map_err(redb_error)?;
            live.insert(
                (lease.group.clone(), lease.worker),
                (lease.token, now.saturating_add(nanos(lease.ttl))),
            );
            Ok(WorkerLease {
                floor_unix_ms: floor,
                ..lease
            })
        })
        .await
    }

    async fn release(&self, lease: &WorkerLease, floor_unix_ms: u64) -> Result<(), LeaseError> {
        let lease = lease.clone();
        self.lease_op(move |db, leases| {
            let txn = begin_durable(db)?;
            let mut live = leases.lock();
            let name = lease.group.as_str();
            {
                let mut workers = txn.open_table(WORKER_LEASES).map_err(redb_error)?;
                let slot = read_slot(&workers, name, lease.worker)?;
                check_current(&lease, slot.as_ref())?;
                let mut slot = slot.ok_or_else(|| unavailable("lease record vanished".into()))?;
                slot.floor_unix_ms = crate::lease::kept_floor(slot.floor_unix_ms, floor_unix_ms);
                workers
                    .insert((name, lease.worker), encode_worker(&slot).as_slice())
                    .map_err(redb_error)?;
            }
            txn.commit().map_err(redb_error)?;
            live.remove(&(lease.group.clone(), lease.worker));
            Ok(())
        })
        .await
    }

    async fn group(
        &self,
        group: &NamespaceName,
    ) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, LeaseError> {
        let group = group.clone();
        self.lease_op(move |db, leases| {
            let txn = db.begin_read().map_err(redb_error)?;
            let groups = txn.open_table(LEASE_GROUPS).map_err(redb_error)?;
            let workers = txn.open_table(WORKER_LEASES).map_err(redb_error)?;
            let Some(record) = read_group(&groups, group.as_str())? else {
                return Ok(None);
            };
            let mut slots = read_slots(&workers, group.as_str())?;
            // A lease granted after this read transaction began carries a token the records
            // read here do not have: it shows as free, as it was when the records were read.
            let live = leases.lock();
            mark_live(&mut slots, &group, &live, leases.clock.monotonic_nanos());
            Ok(Some((record, slots)))
        })
        .await
    }
}
