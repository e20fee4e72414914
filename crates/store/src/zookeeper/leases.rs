//! Worker leases of the ZooKeeper authority ([`WorkerLeases`] for [`ZookeeperAuthority`]):
//! a session per lease whose timeout is the TTL, an ephemeral live znode per held worker id,
//! persistent group and worker records.
//!
//! Expiry is judged by ZooKeeper's clock alone: a lease is live while the EPHEMERAL znode
//! `live/<worker>` exists, and ZooKeeper deletes an ephemeral znode when the session that
//! created it ends. The durable part (token, holder, floor) is the persistent `workers/<worker>`,
//! and the group's layout and last token the persistent group znode.
//!
//! - **A session per lease, whose timeout is the TTL.** Each acquired lease gets a ZooKeeper
//!   session of its own, asked for with the lease's TTL as its session timeout; the server
//!   clamps it to its `minSessionTimeout`..`maxSessionTimeout` (by default 2 and 20 ticks, 4 s
//!   and 40 s), and the timeout it granted is the lease's TTL ([`WorkerLease::ttl`]; it may be
//!   *below* the TTL asked for if the server's maximum is lower: the holder must renew within
//!   what it was granted). The session is *detached* and its connection closed right after each
//!   acquisition and renewal, so nothing pings it in between: if the holder stops renewing, the
//!   server expires it one TTL after the last renewal and deletes `live/<worker>`, which frees
//!   the worker id. (A session kept connected would be kept alive by the client library's pings
//!   even when the holder stopped renewing, and could not expire by itself.)
//! - **acquire**: reads the group (its record and version, the worker records and the live
//!   znodes), runs [`plan_acquire`], then commits from the lease's new session one `multi`
//!   transaction: the audit entry (`leased`) created, the group record set at the version read
//!   (or created, with its two directories), the worker record set at the version read (or
//!   created), and the ephemeral `live/<worker>` created. Concurrent acquisitions conflict on
//!   the group's version (every acquisition changes it) or on the live znode (`NodeExists`),
//!   and retry from a fresh read; so at most one live lease per worker id, and tokens strictly
//!   increase per group.
//! - **renew**: reads the worker record (its token must be the lease's, else
//!   [`LeaseError::Superseded`], nothing written) and `live/<worker>`. If the znode is there
//!   and owned by the lease's session, the session is resumed (a reconnection with its id and
//!   password, which restarts its timeout at the server) and the floor raised with a `multi`
//!   (version check of `live/<worker>`, `setData` of the worker record at the version read). If
//!   the session expired (the lease lapsed) but nobody acquired the worker id since (the record
//!   still names the lease: token and holder), the lease is re-established: a new session, and
//!   one `multi` that writes a `leased` ledger entry, checks the worker record's version, sets
//!   the floor, deletes the stale live znode if it is still there (only ever the lease's own:
//!   one of another token or holder is damage, and nothing is written) and creates the new one.
//!   Either way the renewal succeeds only while the record names the lease, as
//!   [`WorkerLeases::renew`] requires: a store that lost its records and granted token 1 again
//!   to another node is never taken over.
//! - **release**: one `multi`: the worker record set with the given floor at the version read
//!   (its token checked first), and `live/<worker>` deleted at its version. The lease's session
//!   then holds nothing and expires after its TTL.
//! - A lease whose acquisition failed after the commit (lost reply) leaves a live znode of a
//!   session nobody resumes: it vanishes one TTL later, and until then the worker id is held.
//! - The sessions of the leases are known only to the `ZookeeperAuthority` that acquired them;
//!   renewing through another one re-establishes the lease under a new session (the old live
//!   znode, of the same token, is replaced).

use super::record::{
    decode_group, decode_live, decode_worker, encode_group, encode_live, encode_worker, worker_id,
    Live,
};
use super::session::{
    committed, fail, failed, open_session, resume_session, retry_backoff, retry_pause, timed,
    unavailable, Deadline, Fail,
};
use super::{ZookeeperAuthority, EPHEMERAL, MAX_CONFLICTS, PERSISTENT};
use crate::audit::AuditEvent;
use crate::lease::{
    check_current, is_current, plan_acquire, superseded, GroupRecord, LeaseError, LeaseRequest,
    WorkerLease, WorkerLeases, WorkerSlot,
};
use crate::{ops, StoreError};
use async_trait::async_trait;
use idmint_core::NamespaceName;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::Duration;
use zookeeper_client::{Client, Error as ZkError, MultiWriteError, SessionInfo, Stat};

/// The session of a lease this authority acquired or re-established.
#[derive(Debug, Clone)]
pub(super) struct LeaseSession {
    token: u64,
    session: SessionInfo,
}

impl ZookeeperAuthority {
    fn group_path(&self, group: &NamespaceName) -> String {
        format!("{}/{}", self.lease_dir, group.as_str())
    }

    /// The group as stored now: `None` if never acquired. Read again after a connection loss.
    async fn read_group(
        &self,
        group: &NamespaceName,
        deadline: Deadline,
    ) -> Result<Option<GroupView>, StoreError> {
        let mut retries = retry_backoff();
        loop {
            match self.read_group_once(group, deadline).await {
                Err(Fail::Transient) => retry_pause(deadline, &mut retries).await,
                Err(Fail::Store(e)) => return Err(e),
                Ok(view) => return Ok(view),
            }
        }
    }

    async fn read_group_once(
        &self,
        group: &NamespaceName,
        deadline: Deadline,
    ) -> Result<Option<GroupView>, Fail> {
        let client = self.client(deadline).await?;
        let path = self.group_path(group);
        let what = format!("reading lease group {group}");
        let (data, stat) = match timed(deadline, &what, client.get_data(&path)).await? {
            Ok(found) => found,
            Err(ZkError::NoNode) => return Ok(None),
            Err(e) => return Err(fail(&what, e)),
        };
        let record = decode_group(group, &data)?;
        let workers_dir = format!("{path}/workers");
        let live_dir = format!("{path}/live");
        // Sent at once, answered in order.
        let workers = client.list_children(&workers_dir);
        let live = client.list_children(&live_dir);
        let workers = timed(deadline, &what, workers)
            .await?
            .map_err(|e| fail(&what, e))?;
        let live = timed(deadline, &what, live)
            .await?
            .map_err(|e| fail(&what, e))?;
        let worker_reads: Vec<_> = workers
            .iter()
            .map(|w| (w.clone(), client.get_data(&format!("{workers_dir}/{w}"))))
            .collect();
        let live_reads: Vec<_> = live
            .iter()
            .map(|w| (w.clone(), client.get_data(&format!("{live_dir}/{w}"))))
            .collect();
        let mut view = GroupView {
            record,
            version: stat.version,
            workers: HashMap::new(),
            live: HashMap::new(),
        };
        for (child, read) in worker_reads {
            let worker = worker_id(group, &child)?;
            match timed(deadline, &what, read).await? {
                Ok((data, stat)) => {
                    let slot = decode_worker(group, worker, &data)?;
                    view.workers.insert(worker, (slot, stat.version));
                }
                // Worker records are never deleted; a vanished one is a concurrent edit by hand.
                Err(ZkError::NoNode) => {}
                Err(e) => return Err(fail(&what, e)),
            }
        }
        for (child, read) in live_reads {
            let worker = worker_id(group, &child)?;
            match timed(deadline, &what, read).await? {
                Ok((data, stat)) => {
                    let live = decode_live(group, worker, &data)?;
                    view.live.insert(worker, (live, stat));
                }
                // Expired in between: free.
                Err(ZkError::NoNode) => {}
                Err(e) => return Err(fail(&what, e)),
            }
        }
        Ok(Some(view))
    }

    /// The worker record of `lease` with its version, and its live znode (if any). Read again
    /// after a connection loss.
    async fn read_worker(
        &self,
        lease: &WorkerLease,
        deadline: Deadline,
    ) -> Result<WorkerRead, StoreError> {
        let mut retries = retry_backoff();
        loop {
            match self.read_worker_once(lease, deadline).await {
                Err(Fail::Transient) => retry_pause(deadline, &mut retries).await,
                Err(Fail::Store(e)) => return Err(e),
                Ok(read) => return Ok(read),
            }
        }
    }

    async fn read_worker_once(
        &self,
        lease: &WorkerLease,
        deadline: Deadline,
    ) -> Result<WorkerRead, Fail> {
        let client = self.client(deadline).await?;
        let (worker_path, live_path) = self.worker_paths(&lease.group, lease.worker);
        let what = format!("reading worker {} of group {}", lease.worker, lease.group);
        let record = client.get_data(&worker_path);
        let live = client.get_data(&live_path);
        let record = match timed(deadline, &what, record).await? {
            Ok((data, stat)) => Some((
                decode_worker(&lease.group, lease.worker, &data)?,
                stat.version,
            )),
            Err(ZkError::NoNode) => None,
            Err(e) => return Err(fail(&what, e)),
        };
        let live = match timed(deadline, &what, live).await? {
            Ok((data, stat)) => Some((decode_live(&lease.group, lease.worker, &data)?, stat)),
            Err(ZkError::NoNode) => None,
            Err(e) => return Err(fail(&what, e)),
        };
        Ok((record, live))
    }

    fn worker_paths(&self, group: &NamespaceName, worker: u64) -> (String, String) {
        let path = self.group_path(group);
        (
            format!("{path}/workers/{worker}"),
            format!("{path}/live/{worker}"),
        )
    }

    /// Deletes lease group `group`'s znodes (its record, worker records and live znodes) and
    /// nothing else, as a mistaken operator would: the conformance suite's
    /// `a_deleted_group_is_never_created_again`.
    #[cfg(feature = "conformance")]
    #[doc(hidden)]
    pub async fn delete_lease_group_records(
        &self,
        group: &NamespaceName,
    ) -> Result<(), StoreError> {
        let deadline = self.deadline();
        let client = self.client(deadline).await?;
        let what = "deleting a lease group";
        let path = self.group_path(group);
        for dir in [format!("{path}/workers"), format!("{path}/live")] {
            let children = match timed(deadline, what, client.list_children(&dir)).await? {
                Ok(children) => children,
                Err(ZkError::NoNode) => Vec::new(),
                Err(e) => return Err(failed(what, &e)),
            };
            for child in children {
                timed(
                    deadline,
                    what,
                    client.delete(&format!("{dir}/{child}"), None),
                )
                .await?
                .map_err(|e| failed(what, &e))?;
            }
            if let Err(e) = timed(deadline, what, client.delete(&dir, None)).await? {
                if !matches!(e, ZkError::NoNode) {
                    return Err(failed(what, &e));
                }
            }
        }
        timed(deadline, what, client.delete(&path, None))
            .await?
            .map_err(|e| failed(what, &e))
    }

    fn lease_session(&self, group: &NamespaceName, worker: u64, token: u64) -> Option<SessionInfo> {
        let sessions = self
            .lease_sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sessions
            .get(&(group.clone(), worker))
            .filter(|s| s.token == token)
            .map(|s| s.session.clone())
    }

    fn remember_session(&self, group: &NamespaceName, worker: u64, token: u64, client: &Client) {
        let mut sessions = self
            .lease_sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sessions.insert(
            (group.clone(), worker),
            LeaseSession {
                token,
                session: client.session().clone(),
            },
        );
    }

    fn forget_session(&self, group: &NamespaceName, worker: u64) {
        let mut sessions = self
            .lease_sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sessions.remove(&(group.clone(), worker));
    }

    /// A new detached session for a lease of `ttl`.
    async fn lease_client(&self, ttl: Duration, deadline: Deadline) -> Result<Client, StoreError> {
        open_session(&self.connect_string, ttl, None, true, deadline).await
    }

    /// One acquisition attempt on a fresh read; `Ok(None)` on a conflict.
    async fn try_acquire(
        &self,
        request: &LeaseRequest,
        session: &mut Option<Client>,
        deadline: Deadline,
    ) -> Result<Option<WorkerLease>, LeaseError> {
        let view = self.read_group(&request.group, deadline).await?;
        // The write creates the group's znode when it was absent, which fails if it exists by
        // then, so a group deleted after this read is read again (and refused) on the retry.
        // A trace with the group now present is a concurrent first acquisition (its entry and
        // the group are one write): a conflict, decided again on a fresh read.
        if view.is_none() && crate::lease::ledger_shows_group(self, &request.group).await? {
            if self.read_group(&request.group, deadline).await?.is_some() {
                return Ok(None);
            }
            return Err(crate::lease::lost_group(&request.group, "zookeeper"));
        }
        let slots = view.as_ref().map_or_else(Vec::new, GroupView::slots);
        let grant = plan_acquire(request, view.as_ref().map(|v| &v.record), &slots)?;
        let client = match session {
            Some(client) => client.clone(),
            None => {
                let client = self.lease_client(request.ttl, deadline).await?;
                *session = Some(client.clone());
                client
            }
        };
        let ttl = client.session_timeout();
        let group_path = self.group_path(&request.group);
        let (worker_path, live_path) = self.worker_paths(&request.group, grant.worker);
        let worker = WorkerSlot {
            worker: grant.worker,
            token: grant.token,
            holder: request.holder.clone(),
            floor_unix_ms: grant.floor_unix_ms,
            expires_in: None,
        };
        let live = Live {
            token: grant.token,
            ttl,
            holder: request.holder.clone(),
        };
        let group_data = encode_group(&grant.group);
        let worker_data = encode_worker(&worker);
        let live_data = encode_live(&live);
        let event = AuditEvent::Leased {
            worker: grant.worker,
            token: grant.token,
        };
        // Operation 0: the entry; then the group, the worker record and the live znode.
        let mut multi = client.new_multi_writer();
        let built = (|| {
            self.add_audit_entry_by(&mut multi, &request.group, &event, &request.holder)?;
            match &view {
                Some(v) => {
                    multi.add_set_data(&group_path, group_data.as_bytes(), Some(v.version))?
                }
                None => {
                    multi.add_create(&group_path, group_data.as_bytes(), &PERSISTENT)?;
                    multi.add_create(&format!("{group_path}/workers"), b"", &PERSISTENT)?;
                    multi.add_create(&format!("{group_path}/live"), b"", &PERSISTENT)?;
                }
            }
            match view.as_ref().and_then(|v| v.workers.get(&grant.worker)) {
                Some((_, version)) => {
                    multi.add_set_data(&worker_path, worker_data.as_bytes(), Some(*version))?
                }
                None => multi.add_create(&worker_path, worker_data.as_bytes(), &PERSISTENT)?,
            }
            multi.add_create(&live_path, live_data.as_bytes(), &EPHEMERAL)
        })();
        built.map_err(|e| failed("building a lease transaction", &e))?;
        let what = format!("acquiring a lease of group {}", request.group);
        let result = timed(deadline, &what, multi.commit()).await?;
        if let Err(MultiWriteError::OperationFailed {
            index: 0,
            source: ZkError::NoNode,
        }) = result
        {
            // The group's audit directory is missing: make it and go again.
            self.ensure_audit_dir(&request.group, deadline).await?;
            return Ok(None);
        }
        if committed(&what, result)?.is_none() {
            return Ok(None);
        }
        self.remember_session(&request.group, grant.worker, grant.token, &client);
        Ok(Some(WorkerLease {
            group: request.group.clone(),
            worker: grant.worker,
            token: grant.token,
            floor_unix_ms: grant.floor_unix_ms,
            ttl,
            holder: request.holder.clone(),
        }))
    }

    /// One renewal attempt on a fresh read; `Ok(None)` on a conflict.
    async fn try_renew(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
        deadline: Deadline,
    ) -> Result<Option<WorkerLease>, LeaseError> {
        let (record, live) = self.read_worker(lease, deadline).await?;
        let (slot, version) = match record {
            Some((slot, version)) if is_current(lease, &slot) => (slot, version),
            other => {
                self.forget_session(&lease.group, lease.worker);
                return Err(superseded(lease, other.as_ref().map(|(s, _)| s)));
            }
        };
        let floor = crate::lease::kept_floor(slot.floor_unix_ms, floor_unix_ms);
        let renewed = WorkerLease {
            floor_unix_ms: floor,
            ..lease.clone()
        };
        let (worker_path, live_path) = self.worker_paths(&lease.group, lease.worker);
        let new_record = encode_worker(&WorkerSlot {
            floor_unix_ms: floor,
            ..slot.clone()
        });
        let what = format!("renewing worker {} of group {}", lease.worker, lease.group);
        if let Some((live, _)) = &live {
            if live.token != lease.token || live.holder != lease.holder {
                // Never another holder's live znode: the record names this lease, so this is
                // damage, and nothing is written (in particular, that znode is not deleted).
                return Err(StoreError::Corrupt {
                    message: format!(
                        "ZooKeeper lease group {}: worker {} is recorded with token {} of {} but \
                         its live lease has token {} of {}",
                        lease.group,
                        lease.worker,
                        lease.token,
                        lease.holder,
                        live.token,
                        live.holder
                    ),
                }
                .into());
            }
        }
        // The lease's own session, if it still exists: resuming it restarts its timeout.
        let known = self.lease_session(&lease.group, lease.worker, lease.token);
        if let (Some((_, stat)), Some(session)) = (&live, known) {
            if stat.ephemeral_owner == session.id().0 {
                // If it lapsed, it is re-established below (the stale znode goes with the
                // session).
                if let Ok(()) =
                    resume_session(&self.connect_string, session, lease.ttl, deadline).await
                {
                    {
                        let client = self.client(deadline).await?;
                        let mut multi = client.new_multi_writer();
                        multi
                            .add_check_version(&live_path, stat.version)
                            .and_then(|()| {
                                multi.add_set_data(
                                    &worker_path,
                                    new_record.as_bytes(),
                                    Some(version),
                                )
                            })
                            .map_err(|e| failed("building a renewal", &e))?;
                        let done = committed(&what, timed(deadline, &what, multi.commit()).await?)?;
                        return Ok(done.map(|_| renewed));
                    }
                }
            }
        }
        // The lease lapsed (or its session is not this authority's), and the record still
        // names it: re-establish it under a new session, with a ledger entry. The live znode
        // deleted here, if any, is this lease's own (checked above).
        let client = self.lease_client(lease.ttl, deadline).await?;
        let live_data = encode_live(&Live {
            token: lease.token,
            ttl: client.session_timeout(),
            holder: lease.holder.clone(),
        });
        let event = AuditEvent::Leased {
            worker: lease.worker,
            token: lease.token,
        };
        let mut multi = client.new_multi_writer();
        let built = (|| {
            self.add_audit_entry_by(&mut multi, &lease.group, &event, &lease.holder)?;
            multi.add_set_data(&worker_path, new_record.as_bytes(), Some(version))?;
            if let Some((_, stat)) = &live {
                multi.add_delete(&live_path, Some(stat.version))?;
            }
            multi.add_create(&live_path, live_data.as_bytes(), &EPHEMERAL)
        })();
        built.map_err(|e| failed("building a renewal", &e))?;
        let result = timed(deadline, &what, multi.commit()).await?;
        if let Err(MultiWriteError::OperationFailed {
            index: 0,
            source: ZkError::NoNode,
        }) = result
        {
            self.ensure_audit_dir(&lease.group, deadline).await?;
            return Ok(None);
        }
        if committed(&what, result)?.is_none() {
            return Ok(None);
        }
        self.remember_session(&lease.group, lease.worker, lease.token, &client);
        Ok(Some(renewed))
    }

    /// One release attempt on a fresh read; `Ok(None)` on a conflict.
    async fn try_release(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
        deadline: Deadline,
    ) -> Result<Option<()>, LeaseError> {
        let (record, live) = self.read_worker(lease, deadline).await?;
        let current = record.as_ref().map(|(s, _)| s);
        if let Err(e) = check_current(lease, current) {
            self.forget_session(&lease.group, lease.worker);
            return Err(e);
        }
        let Some((slot, version)) = record else {
            return Err(superseded(lease, None));
        };
        let (worker_path, live_path) = self.worker_paths(&lease.group, lease.worker);
        let new_record = encode_worker(&WorkerSlot {
            floor_unix_ms: crate::lease::kept_floor(slot.floor_unix_ms, floor_unix_ms),
            ..slot
        });
        let client = self.client(deadline).await?;
        let mut multi = client.new_multi_writer();
        let built = (|| {
            multi.add_set_data(&worker_path, new_record.as_bytes(), Some(version))?;
            match &live {
                Some((live, stat)) if live.token == lease.token && live.holder == lease.holder => {
                    multi.add_delete(&live_path, Some(stat.version))
                }
                _ => Ok(()),
            }
        })();
        built.map_err(|e| failed("building a release", &e))?;
        let what = format!("releasing worker {} of group {}", lease.worker, lease.group);
        let done = committed(&what, timed(deadline, &what, multi.commit()).await?)?;
        if done.is_some() {
            self.forget_session(&lease.group, lease.worker);
        }
        Ok(done.map(|_| ()))
    }

    /// Runs `attempt` until it does not conflict, at most [`MAX_CONFLICTS`] times.
    async fn retrying<T, F, Fut>(&self, what: &str, attempt: F) -> Result<T, LeaseError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Option<T>, LeaseError>>,
    {
        let mut backoff = ops::conflict_backoff();
        loop {
            if let Some(done) = attempt().await? {
                return Ok(done);
            }
            self.conflicts.fetch_add(1, Ordering::Relaxed);
            let Some(pause) = backoff.next() else {
                return Err(unavailable(format!(
                    "{what}: gave up after {MAX_CONFLICTS} conflicting writes by other nodes; \
                     retry later"
                ))
                .into());
            };
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    }
}

#[async_trait]
#[async_trait]
impl WorkerLeases for ZookeeperAuthority {
    async fn acquire(&self, request: &LeaseRequest) -> Result<WorkerLease, LeaseError> {
        // Invalid requests (no worker ids, a zero TTL, an id out of range) fail before any I/O.
        plan_acquire(request, None, &[])?;
        let deadline = self.deadline();
        // One lease session for all attempts; if none succeeds it expires after the TTL,
        // holding nothing.
        let session = tokio::sync::Mutex::new(None);
        let what = format!("acquiring a lease of group {}", request.group);
        self.retrying(&what, || async {
            let mut session = session.lock().await;
            self.try_acquire(request, &mut session, deadline).await
        })
        .await
    }

    async fn renew(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
    ) -> Result<WorkerLease, LeaseError> {
        let deadline = self.deadline();
        let what = format!("renewing worker {} of group {}", lease.worker, lease.group);
        self.retrying(&what, || self.try_renew(lease, floor_unix_ms, deadline))
            .await
    }

    async fn release(&self, lease: &WorkerLease, floor_unix_ms: u64) -> Result<(), LeaseError> {
        let deadline = self.deadline();
        let what = format!("releasing worker {} of group {}", lease.worker, lease.group);
        self.retrying(&what, || self.try_release(lease, floor_unix_ms, deadline))
            .await
    }

    async fn group(
        &self,
        group: &NamespaceName,
    ) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, LeaseError> {
        let view = self.read_group(group, self.deadline()).await?;
        Ok(view.map(|v| {
            let slots = v.slots();
            (v.record, slots)
        }))
    }
}

/// A lease group as read: its record and version, the worker records with their versions and
/// the live znodes with their stats.
struct GroupView {
    record: GroupRecord,
    version: i32,
    workers: HashMap<u64, (WorkerSlot, i32)>,
    live: HashMap<u64, (Live, Stat)>,
}

impl GroupView {
    /// Every worker id with a record or a live znode, sorted, live ones with the TTL of their
    /// session as time left (an upper bound: ZooKeeper does not say when a session will
    /// expire).
    fn slots(&self) -> Vec<WorkerSlot> {
        let mut slots: Vec<WorkerSlot> = self
            .workers
            .values()
            .map(|(slot, _)| {
                let mut slot = slot.clone();
                slot.expires_in = self.live.get(&slot.worker).map(|(l, _)| l.ttl);
                slot
            })
            .collect();
        // A live znode without a record (cannot be written by this module): still live.
        for (worker, (live, _)) in &self.live {
            if !self.workers.contains_key(worker) {
                slots.push(WorkerSlot {
                    worker: *worker,
                    token: live.token,
                    holder: live.holder.clone(),
                    floor_unix_ms: 0,
                    expires_in: Some(live.ttl),
                });
            }
        }
        slots.sort_by_key(|s| s.worker);
        slots
    }
}

/// The result of [`ZookeeperAuthority::read_worker`]: the worker record and its version, and the
/// live znode and its stat.
type WorkerRead = (Option<(WorkerSlot, i32)>, Option<(Live, Stat)>);
