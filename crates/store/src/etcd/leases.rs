//! Worker leases of the etcd authority ([`WorkerLeases`] for [`EtcdAuthority`]): per lease
//! group a group key, a durable record per worker id, and a live key per held worker id,
//! attached to an etcd lease, so expiry is etcd's.
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
//!   the record, the live key and the acquisition's audit entry (`leased`). Every acquisition
//!   writes the group key, so two of them in one group never both commit on the same read:
//!   tokens strictly grow. On a conflict it reads
//!   again and retries (as reservations do, at most [`MAX_CONFLICTS`] times, reusing the etcd
//!   lease); an etcd lease left unused (a refusal, an error, a failed transaction) is revoked.
//!   Within one authority, acquisitions in one group run one at a time. A refusal (`Held`,
//!   `PoolFull`) reports the time left from `LeaseTimeToLive` of the live keys' etcd leases.
//! - `renew`: reads the record and live key of the worker id (one read-only `Txn`), refuses
//!   ([`LeaseError::Superseded`], nothing written) unless the record names the lease (token
//!   and holder: a live key next to it is then the lease's own, written with the record),
//!   raises the floor with a `Txn` comparing the `mod_revision`s read, and sends one
//!   `LeaseKeepAlive` for the live key's etcd lease, which restarts its TTL. If the live key
//!   is gone (the etcd lease ran
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

use super::audit::audit_value_by;
use super::conn::unavailable;
use super::record::{
    decode_group, decode_live, decode_record, encode_group, encode_live, encode_record,
    live_without_record, parse_worker, LiveRead, RecordRead,
};
use super::request::{self, range_of};
use super::{unchanged, EtcdAuthority, MAX_CONFLICTS};
use crate::audit::AuditEvent;
use crate::lease::{
    check_current, plan_acquire, GroupRecord, LeaseError, LeaseRequest, WorkerLease, WorkerLeases,
    WorkerSlot,
};
use crate::{ops, StoreError};
use async_trait::async_trait;
use idmint_core::{Backoff, NamespaceName};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

/// How many live leases a refused acquisition asks etcd the time left of.
const REFUSAL_TTL_QUERIES: usize = 8;

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
        let keys = request::prefix(prefix.clone());
        let response = self
            .call_idempotent(&format!("reading lease group {group}"), |client| {
                client.range(keys.clone())
            })
            .await?;
        let mut read = GroupRead {
            revision: response.header.as_ref().map_or(0, |h| h.revision),
            ..GroupRead::default()
        };
        let mut lives = BTreeMap::new();
        for kv in &response.kvs {
            let key = String::from_utf8_lossy(&kv.key);
            let suffix = key.strip_prefix(&prefix).unwrap_or(&key);
            if suffix == "group" {
                read.record = Some((decode_group(group, &kv.value)?, kv.mod_revision));
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
        let txn = request::txn(
            [],
            [
                request::get_op(self.worker_key(group, worker)),
                request::get_op(self.live_key(group, worker)),
            ],
            [],
        );
        let response = self
            .call_idempotent(
                &format!("reading worker {worker} of lease group {group}"),
                |client| client.txn(txn.clone()),
            )
            .await?;
        let mut gets = response.responses.iter().map(|op| match range_of(op) {
            Some(get) => Ok(get.kvs.first().cloned()),
            None => Err(unavailable(format!(
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
        let granted = self
            .call("granting an etcd lease", self.client.lease_grant(secs))
            .await?;
        if !granted.error.is_empty() || granted.id == 0 {
            return Err(unavailable(format!(
                "etcd refused a lease of {secs} s: {}",
                granted.error
            )));
        }
        let ttl = u64::try_from(granted.ttl.max(secs)).unwrap_or(u64::MAX);
        Ok((granted.id, Duration::from_secs(ttl)))
    }

    /// Revokes an etcd lease this authority granted and does not use; a failure is harmless
    /// (the lease runs out by itself, and keys attached to it were meant to go anyway).
    /// Sent twice if the first fails (revoking is idempotent), typically on a connection the
    /// server had just closed: a lease left behind would hold its worker id for a whole TTL.
    async fn revoke_quietly(&self, id: i64) {
        let deadline = tokio::time::Instant::now() + self.config.op_timeout;
        let mut failure = String::new();
        for _ in 0..2 {
            match tokio::time::timeout_at(deadline, self.client.lease_revoke(id)).await {
                Ok(Ok(())) => return,
                // Already gone (revoked by the first attempt, or expired).
                Ok(Err(e))
                    if e.status()
                        .is_some_and(|s| s.message().contains("lease not found")) =>
                {
                    return
                }
                Ok(Err(e)) => failure = e.to_string(),
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
        let answer = self
            .call("reading an etcd lease", self.client.lease_time_to_live(id))
            .await?;
        Ok(match u64::try_from(answer.ttl) {
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
            // The write below requires the group key still absent, so a group deleted after
            // this read is read again (and refused) on the retry. A trace with the group now
            // present is a concurrent first acquisition (its entry and the group are one
            // write): decide again on a fresh read.
            if record.is_none() && crate::lease::ledger_shows_group(self, group).await? {
                if self.read_group(group).await?.record.is_some() {
                    continue;
                }
                return Err(crate::lease::lost_group(group, "etcd"));
            }
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
            let txn = request::txn(
                [
                    unchanged(&group_key, group_rev),
                    unchanged(&worker_key, record_rev),
                    unchanged(&live_key, None),
                    // Defence in depth: entry names are unique by construction.
                    unchanged(&entry, None),
                ],
                [
                    request::put(entry.clone(), audit_value_by(&event, &request.holder), 0),
                    request::put(group_key, encode_group(&grant.group), 0),
                    request::put(worker_key, encode_record(&slot), 0),
                    request::put(
                        live_key,
                        encode_live(grant.token, ttl, &request.holder),
                        lease_id,
                    ),
                ],
                [],
            );
            let response = self.call(&what, self.client.txn(txn)).await?;
            if response.succeeded {
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

    /// Deletes every key of lease group `group` (its record, worker records and live keys)
    /// and nothing else, as a mistaken operator would: the conformance suite's
    /// `a_deleted_group_is_never_created_again`.
    #[cfg(feature = "conformance")]
    #[doc(hidden)]
    pub async fn delete_lease_group_records(
        &self,
        group: &NamespaceName,
    ) -> Result<(), StoreError> {
        let read = self
            .call(
                "reading a lease group",
                self.client.range(request::prefix(self.group_prefix(group))),
            )
            .await?;
        let deletes: Vec<_> = read
            .kvs
            .iter()
            .map(|kv| request::delete_op(kv.key.clone()))
            .collect();
        let txn = request::txn([], deletes, []);
        self.call("deleting a lease group", self.client.txn(txn))
            .await?;
        Ok(())
    }

    /// Sends one keep-alive for etcd lease `id`: `false` if etcd no longer has it.
    async fn keep_alive_once(&self, id: i64) -> Result<bool, StoreError> {
        self.call(
            "renewing an etcd lease",
            self.client.lease_keep_alive_once(id),
        )
        .await
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
            slot.floor_unix_ms = crate::lease::kept_floor(slot.floor_unix_ms, floor_unix_ms);
            let renewed = WorkerLease {
                floor_unix_ms: slot.floor_unix_ms,
                ..lease.clone()
            };
            match live {
                Some(live) => {
                    if slot.floor_unix_ms > record.slot.floor_unix_ms {
                        let txn = request::txn(
                            [
                                unchanged(&worker_key, Some(record.mod_revision)),
                                unchanged(&live_key, Some(live.mod_revision)),
                            ],
                            [request::put(worker_key.clone(), encode_record(&slot), 0)],
                            [],
                        );
                        if !self.call(&what, self.client.txn(txn)).await?.succeeded {
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
                    let txn = request::txn(
                        [
                            unchanged(&group_key, Some(group_rev)),
                            unchanged(&worker_key, Some(record.mod_revision)),
                            unchanged(&live_key, None),
                            unchanged(&entry, None),
                        ],
                        [
                            request::put(entry, audit_value_by(&event, &lease.holder), 0),
                            request::put(group_key, encode_group(&group_record), 0),
                            request::put(worker_key.clone(), encode_record(&slot), 0),
                            request::put(
                                live_key.clone(),
                                encode_live(lease.token, ttl, &lease.holder),
                                lease_id,
                            ),
                        ],
                        [],
                    );
                    match self.call(&what, self.client.txn(txn)).await {
                        Ok(response) if response.succeeded => return Ok(renewed),
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
            slot.floor_unix_ms = crate::lease::kept_floor(slot.floor_unix_ms, floor_unix_ms);
            let mut ops = vec![request::put(worker_key.clone(), encode_record(&slot), 0)];
            if live.is_some() {
                ops.push(request::delete_op(live_key.clone()));
            }
            let txn = request::txn(
                [
                    unchanged(&worker_key, Some(record.mod_revision)),
                    unchanged(&live_key, live.as_ref().map(|l| l.mod_revision)),
                ],
                ops,
                [],
            );
            if self.call(&what, self.client.txn(txn)).await?.succeeded {
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
