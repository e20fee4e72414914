//! [`CheckedAuthority`]: any authority, checked against the node record before anything is
//! created, reserved or leased in it (the invariants are the parent module's): the start
//! checks of [`CheckedAuthority::open`] against [`StoreExpectations`], and at run time the
//! store's incarnation, the namespaces and lease groups the record holds, and its watermarks
//! and floors, kept never above the store's.

use super::NodeRecord;
use crate::lease::{GroupRecord, LeaseError, LeaseRequest, WorkerLease, WorkerLeases, WorkerSlot};
use crate::{
    Authority, ClaimKey, GiveBack, Incarnation, Members, NamespaceState, Reservation, StoreError,
};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec};
use std::sync::Arc;

/// What a node expects of its store at start, beyond what its node record records
/// ([`CheckedAuthority::open`]).
#[derive(Debug, Clone, Default)]
pub struct StoreExpectations {
    /// `idmint serve --init`: an empty store without an incarnation is a new deployment.
    pub init: bool,
    /// The incarnation the configuration names (`[authority] incarnation`), if any.
    pub incarnation: Option<Incarnation>,
    /// The sequence namespaces the configuration declares (they live in the store).
    pub declared_namespaces: Vec<NamespaceName>,
    /// The worker-lease groups the configuration's snowflake namespaces lease from.
    pub declared_groups: Vec<NamespaceName>,
}

/// An authority checked against a [`NodeRecord`]. See the module docs.
#[derive(Debug)]
pub struct CheckedAuthority {
    inner: Arc<dyn Authority>,
    node_record: Arc<NodeRecord>,
    /// The store's incarnation this node uses (`None`: the authority keeps none).
    incarnation: Option<Incarnation>,
}

impl CheckedAuthority {
    /// `inner`, checked against `node_record`, without the start checks of [`Self::open`]: the
    /// store must be the incarnation the node record holds, if it holds one.
    pub fn new(inner: Arc<dyn Authority>, node_record: Arc<NodeRecord>) -> Self {
        let incarnation = node_record.incarnation().ok().flatten();
        CheckedAuthority {
            inner,
            node_record,
            incarnation,
        }
    }

    /// `inner`, checked against `node_record` and `expect` before anything is served: the store
    /// must be the incarnation the node record and the configuration name; an empty store
    /// without one is taken as new (its incarnation created and recorded) only as the module
    /// docs say; a store that holds data but no incarnation gets one. The node record keeps the
    /// incarnation used.
    ///
    /// [`StoreError::StoreLost`] for a store that is not the one expected, or an empty one
    /// that needs `--init`; [`StoreError::InvalidSetup`] when the configuration and the node record
    /// name different incarnations.
    pub async fn open(
        inner: Arc<dyn Authority>,
        node_record: Arc<NodeRecord>,
        expect: &StoreExpectations,
    ) -> Result<CheckedAuthority, StoreError> {
        let recorded = node_record.incarnation().map_err(|e| StoreError::Corrupt {
            message: e.to_string(),
        })?;
        let known = match (&recorded, &expect.incarnation) {
            (Some(r), Some(c)) if r != c => {
                return Err(StoreError::InvalidSetup {
                    message: format!(
                        "the configuration names store incarnation {c}, but this node's record \
                         {} records {r}: one of them belongs to another deployment",
                        node_record.path().display()
                    ),
                })
            }
            (Some(k), _) | (None, Some(k)) => Some(k.clone()),
            (None, None) => None,
        };
        let kind = inner.kind();
        let store = match inner.incarnation().await {
            Ok(store) => store,
            Err(StoreError::NotSupported { .. }) => {
                // An authority of several stores (multi) or of the tier above (upstream): each
                // store checks itself; here only what the node record and the store's list tell.
                let declared: Vec<&str> = expect
                    .declared_namespaces
                    .iter()
                    .map(NamespaceName::as_str)
                    .collect();
                if !expect.init
                    && !declared.is_empty()
                    && !node_record.records_anything()
                    && inner.list().await.is_ok_and(|stored| stored.is_empty())
                {
                    return Err(StoreError::StoreLost {
                        message: format!(
                            "the {kind} authority ({}) holds no namespace and this node's record \
                             {} records none, but the configuration declares {}: if this is a \
                             new deployment, start once with --init; if not, the configuration \
                             points at another store than before or the data directory is not \
                             the one used before",
                            node_record.authority,
                            node_record.path().display(),
                            declared.join(", "),
                        ),
                    });
                }
                return Ok(CheckedAuthority {
                    inner,
                    node_record,
                    incarnation: None,
                });
            }
            Err(e) => return Err(e),
        };
        let incarnation = match (store, known) {
            (Some(s), Some(k)) if s == k => s,
            (Some(s), Some(k)) => {
                return Err(StoreError::StoreLost {
                    message: format!(
                        "the {kind} authority ({}) is store incarnation {s}, but this node knows \
                         its store as {k} (node record {}{}): the configuration points at another \
                         store (another root, table, prefix, database or server). Point it back at \
                         the store this node used",
                        node_record.authority,
                        node_record.path().display(),
                        if expect.incarnation.is_some() {
                            ", configuration"
                        } else {
                            ""
                        },
                    ),
                })
            }
            (None, Some(k)) => {
                return Err(StoreError::StoreLost {
                    message: format!(
                        "the {kind} authority ({}) has no store incarnation, but this node knows \
                         its store as {k} (node record {}): the store was emptied, restored from a \
                         backup older than its first use, re-created, or the configuration points \
                         at another, empty one. Starting fresh on it would hand out ids and \
                         worker ids that were handed out before, so idmint will not. Point the \
                         configuration back at the store, or restore it (docs/uniqueness.md, \
                         \"Stores that moved or lost data\")",
                        node_record.authority,
                        node_record.path().display(),
                    ),
                })
            }
            (Some(s), None) => {
                tracing::info!(incarnation = %s, "store incarnation recorded in the node record");
                s
            }
            (None, None) => {
                let holds_data = Self::holds_data(&*inner, &expect.declared_groups).await?;
                if !holds_data && node_record.records_anything() {
                    return Err(StoreError::StoreLost {
                        message: format!(
                            "the {kind} authority ({}) is empty, but this node's record {} \
                             records namespaces or lease groups it set up there: the store was \
                             emptied or the configuration points at another one. Starting fresh \
                             would hand out ids that were handed out before, so idmint will not \
                             (docs/uniqueness.md, \"Stores that moved or lost data\")",
                            node_record.authority,
                            node_record.path().display(),
                        ),
                    });
                }
                let declared: Vec<&str> = expect
                    .declared_namespaces
                    .iter()
                    .chain(&expect.declared_groups)
                    .map(NamespaceName::as_str)
                    .collect();
                if !holds_data && !expect.init && !declared.is_empty() {
                    return Err(StoreError::StoreLost {
                        message: format!(
                            "the {kind} authority ({}) is empty and has no store incarnation, and \
                             this node's record {} holds none, but the configuration declares \
                             {}: if this is a new deployment, start once with --init; if not, \
                             the store was emptied or the configuration points at another store \
                             than before (authority path, table, prefix, root or database), or \
                             the data directory is not the one used before",
                            node_record.authority,
                            node_record.path().display(),
                            declared.join(", "),
                        ),
                    });
                }
                let created = inner.create_incarnation(&Incarnation::random()).await?;
                if holds_data {
                    tracing::info!(incarnation = %created, "the store holds data but no incarnation: incarnation created");
                } else {
                    tracing::info!(incarnation = %created, "new store: incarnation created; name it in the configuration ([authority] incarnation) so that every node, even one that never ran, refuses any other store");
                }
                created
            }
        };
        if recorded.as_ref() != Some(&incarnation) {
            node_record.record_incarnation(&incarnation).await?;
        }
        Ok(CheckedAuthority {
            inner,
            node_record,
            incarnation: Some(incarnation),
        })
    }

    /// Whether the store holds a namespace, or one of `groups`.
    async fn holds_data(
        inner: &dyn Authority,
        groups: &[NamespaceName],
    ) -> Result<bool, StoreError> {
        if !inner.list().await?.is_empty() {
            return Ok(true);
        }
        if let Some(leases) = inner.worker_leases() {
            for group in groups {
                match leases.group(group).await {
                    Ok(Some(_)) => return Ok(true),
                    Ok(None) => {}
                    Err(LeaseError::Store(e)) => return Err(e),
                    // An authority whose lease tables cannot exist holds no group.
                    Err(_) => {}
                }
            }
        }
        Ok(false)
    }

    /// The node record.
    pub fn node_record(&self) -> &Arc<NodeRecord> {
        &self.node_record
    }

    /// The store's incarnation this node uses, if the authority keeps one.
    pub fn incarnation(&self) -> Option<&Incarnation> {
        self.incarnation.as_ref()
    }

    /// Checks, before anything is created or leased in the store, that it is still the
    /// incarnation this node uses.
    async fn check_store(&self) -> Result<(), StoreError> {
        let Some(known) = &self.incarnation else {
            return Ok(());
        };
        let kind = self.inner.kind();
        match self.inner.incarnation().await? {
            Some(now) if &now == known => Ok(()),
            found => Err(StoreError::StoreLost {
                message: format!(
                    "the {kind} authority's store is {}, no longer incarnation {known} that this \
                     node started on (node record {}): it was emptied, restored or replaced while \
                     the node ran. Nothing is created or leased there; restore the store \
                     (docs/uniqueness.md, \"Stores that moved or lost data\")",
                    found.map_or_else(
                        || "without an incarnation".to_owned(),
                        |f| format!("incarnation {f}")
                    ),
                    self.node_record.path().display()
                ),
            }),
        }
    }

    /// The node record's checks of `name`, run before anything is set up or claimed in the
    /// store: the store is still this node's incarnation, and has the namespace the record
    /// holds at a watermark at least the record's. Returns what the record holds.
    async fn check_namespace(
        &self,
        name: &NamespaceName,
    ) -> Result<Option<super::Entry>, StoreError> {
        self.check_store().await?;
        let seen = self.node_record.recorded(name);
        if let Some(entry) = seen.clone() {
            match self.inner.state(name).await? {
                None => {
                    return Err(self.node_record.lost(
                        name,
                        &entry,
                        &format!("the {} authority has no record of it", self.inner.kind()),
                    ))
                }
                Some(s)
                    if s.watermark < entry.watermark && self.inner.reports_store_watermark() =>
                {
                    return Err(self.node_record.lost(
                        name,
                        &entry,
                        &format!(
                            "the {} authority's watermark is {}, below what this node saw",
                            self.inner.kind(),
                            s.watermark
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(seen)
    }

    fn leases(&self) -> Result<&dyn WorkerLeases, LeaseError> {
        self.inner.worker_leases().ok_or_else(|| {
            LeaseError::Store(StoreError::NotSupported {
                backend: self.inner.kind(),
                what: "worker leases",
            })
        })
    }
}

#[async_trait]
impl Authority for CheckedAuthority {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn members(&self) -> Option<&dyn Members> {
        self.inner.members()
    }

    fn upper_nodes(&self) -> Vec<crate::UpperNode> {
        self.inner.upper_nodes()
    }

    fn residues(&self, spec: &SequenceSpec) -> Vec<u64> {
        self.inner.residues(spec)
    }

    fn note_floor(&self, name: &NamespaceName, floor: u64) {
        self.inner.note_floor(name, floor);
    }

    fn reports_store_watermark(&self) -> bool {
        self.inner.reports_store_watermark()
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.node_record.flush().await?;
        self.inner.flush().await
    }

    /// Its own checks ([`WorkerLeases`] for `CheckedAuthority`) in front of the inner
    /// authority's leases.
    fn worker_leases(&self) -> Option<&dyn WorkerLeases> {
        self.inner
            .worker_leases()
            .map(|_| self as &dyn WorkerLeases)
    }

    fn audit_log(&self) -> Option<&dyn crate::AuditLog> {
        self.inner.audit_log()
    }

    async fn incarnation(&self) -> Result<Option<Incarnation>, StoreError> {
        self.inner.incarnation().await
    }

    async fn create_incarnation(&self, candidate: &Incarnation) -> Result<Incarnation, StoreError> {
        self.inner.create_incarnation(candidate).await
    }

    /// Moves the store's watermark; the node record learns the higher watermark as from a
    /// reservation.
    async fn advance(
        &self,
        name: &NamespaceName,
        to: u64,
        why: crate::Advance,
    ) -> Result<crate::Advanced, StoreError> {
        let advanced = self.inner.advance(name, to, why).await?;
        if let Err(e) = self.node_record.note(name, advanced.state.watermark).await {
            tracing::warn!(namespace = %name, error = %e, "the node record could not record a watermark; it will try again at the next reservation");
        }
        Ok(advanced)
    }

    /// Refuses a store that is no longer this node's incarnation, and a namespace the node record
    /// records but the store does not have, or has at a lower watermark; otherwise sets it up
    /// in the store and records it durably before answering.
    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let seen = self.check_namespace(name).await?;
        let state = self.inner.ensure_namespace(name, spec).await?;
        self.node_record.record(&state).await?;
        // The highest end this node itself reserved: what it may have served.
        if let Some(entry) = seen {
            self.inner.note_floor(name, entry.watermark);
        }
        Ok(state)
    }

    /// Reserves from the store; a store that no longer knows the namespace has lost it.
    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        match self.inner.reserve(name, count).await {
            Ok(r) if !self.inner.reports_store_watermark() => {
                // The node record is the only durable record of this node's floor (the tier
                // above keeps none per lower node): written before any id of the block is
                // served, or the block is burned.
                self.node_record.note_now(name, r.watermark).await?;
                Ok(r)
            }
            Ok(r) => {
                // A failed watermark write only weakens the check; the block is good. Said
                // once per failure, not hidden.
                if let Err(e) = self.node_record.note(name, r.watermark).await {
                    tracing::warn!(namespace = %name, error = %e, "the node record could not record a watermark; it will try again at the next reservation");
                }
                Ok(r)
            }
            Err(StoreError::UnknownNamespace { .. }) => match self.node_record.recorded(name) {
                Some(entry) => Err(self.node_record.lost(
                    name,
                    &entry,
                    &format!("the {} authority has no record of it", self.inner.kind()),
                )),
                None => Err(StoreError::UnknownNamespace { name: name.clone() }),
            },
            Err(e) => Err(e),
        }
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        self.inner.state(name).await
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        self.inner.list().await
    }

    /// Lowers the node record first (so it never records more than the store), then gives back.
    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        self.node_record.lower(name, tail.start()).await?;
        self.inner.give_back(name, tail).await
    }

    async fn park(
        &self,
        name: &NamespaceName,
        key: &ClaimKey,
        blocks: &[Block],
    ) -> Result<(), StoreError> {
        self.inner.park(name, key, blocks).await
    }

    /// Claims only in a store that passes the node record's checks of the namespace (this
    /// node's incarnation, the namespace not lost or rolled back below what this node saw).
    async fn claim(&self, name: &NamespaceName, key: &ClaimKey) -> Result<Vec<Block>, StoreError> {
        self.check_namespace(name).await?;
        self.inner.claim(name, key).await
    }
}

/// The inner authority's worker leases, behind the record's checks: an acquisition happens
/// only in the store incarnation this node uses, and never starts a group the node record holds
/// afresh (the store must have it, at a token and floor at least the record's); every lease
/// acquired is recorded before it is returned.
#[async_trait]
impl WorkerLeases for CheckedAuthority {
    async fn acquire(&self, request: &LeaseRequest) -> Result<WorkerLease, LeaseError> {
        let leases = self.leases()?;
        self.check_store().await?;
        if let Some(entry) = self.node_record.group(&request.group) {
            let group = &request.group;
            let lost = |found: String| StoreError::StoreLost {
                message: format!(
                    "lease group {group}: {found}, but this node's record {} records it (set up \
                     on {}, token {}, worker {} with floor {} ms): the store lost its leases. \
                     Acquiring afresh could give a worker id that another node still issues \
                     under, so idmint will not (docs/uniqueness.md, \"Stores that moved or lost \
                     data\")",
                    self.node_record.path().display(),
                    entry.authority,
                    entry.last_token,
                    entry.worker,
                    entry.floor_unix_ms,
                ),
            };
            let kind = self.inner.kind();
            match leases.group(group).await? {
                None => {
                    return Err(lost(format!("the {kind} authority has no record of it")).into())
                }
                Some((record, _)) if record.last_token < entry.last_token => {
                    return Err(lost(format!(
                        "the {kind} authority's last token is {}, below this node's",
                        record.last_token
                    ))
                    .into())
                }
                Some((_, slots)) => {
                    if let Some(slot) = slots
                        .iter()
                        .find(|s| s.worker == entry.worker && s.floor_unix_ms < entry.floor_unix_ms)
                    {
                        return Err(lost(format!(
                            "the {kind} authority's floor of worker {} is {} ms, below this node's",
                            slot.worker, slot.floor_unix_ms
                        ))
                        .into());
                    }
                }
            }
        }
        let lease = leases.acquire(request).await?;
        self.node_record.record_lease(&lease).await?;
        Ok(lease)
    }

    async fn renew(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
    ) -> Result<WorkerLease, LeaseError> {
        let renewed = self.leases()?.renew(lease, floor_unix_ms).await?;
        if let Err(e) = self
            .node_record
            .note_floor(lease, renewed.floor_unix_ms)
            .await
        {
            tracing::warn!(group = %lease.group, error = %e, "the node record could not record a lease floor; it will try again at the next renewal");
        }
        Ok(renewed)
    }

    /// Lowers the record's floor first (durably), then releases: the node record never records a
    /// floor above the store's.
    async fn release(&self, lease: &WorkerLease, floor_unix_ms: u64) -> Result<(), LeaseError> {
        let leases = self.leases()?;
        self.node_record.lower_floor(lease, floor_unix_ms).await?;
        leases.release(lease, floor_unix_ms).await
    }

    async fn group(
        &self,
        group: &NamespaceName,
    ) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, LeaseError> {
        self.leases()?.group(group).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::MemoryAuthority;
    use std::time::Duration;

    /// A store restored from an older backup (its watermark below what the node saw) is
    /// refused, and a give-back lowers the node record first so a clean restart is not refused.
    #[tokio::test]
    async fn a_store_that_went_back_in_time_is_refused_and_a_give_back_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let node_record = || Arc::new(NodeRecord::open(dir.path(), "memory".into()).unwrap());
        let name = NamespaceName::new("orders").unwrap();
        let spec = SequenceSpec::default_64();
        let store = Arc::new(MemoryAuthority::new());
        let a = CheckedAuthority::new(store.clone(), node_record());
        a.ensure_namespace(&name, spec).await.unwrap();
        let r = a.reserve(&name, 100).await.unwrap();
        a.node_record().flush().await.unwrap();
        // A clean shutdown hands back the tail: the node record is lowered with the store.
        let tail = Block::new(r.block.start() + 50, r.block.end(), 1).unwrap();
        assert_eq!(a.give_back(&name, tail).await.unwrap(), GiveBack::Returned);
        let again = CheckedAuthority::new(store.clone(), node_record());
        again.ensure_namespace(&name, spec).await.unwrap();
        again.reserve(&name, 10).await.unwrap();
        again.node_record().flush().await.unwrap();

        // An older backup: the namespace exists, at a lower watermark.
        let restored = Arc::new(MemoryAuthority::new());
        restored.ensure_namespace(&name, spec).await.unwrap();
        restored.reserve(&name, 20).await.unwrap();
        let err = CheckedAuthority::new(restored, node_record())
            .ensure_namespace(&name, spec)
            .await
            .unwrap_err();
        assert!(
            err.is_lost() && err.to_string().contains("below what this node saw"),
            "{err}"
        );
    }

    /// A store of the right incarnation that lost a lease group the node record holds (a backup
    /// from before the group existed) is refused, and so is one whose last token went back.
    #[tokio::test]
    async fn a_lease_group_the_store_lost_is_never_started_fresh() {
        use crate::lease::{LeaseRequest, WorkerChoice};
        let dir = tempfile::tempdir().unwrap();
        let node_record = || Arc::new(NodeRecord::open(dir.path(), "memory".into()).unwrap());
        let group = NamespaceName::new("events").unwrap();
        let request = |holder: &str| LeaseRequest {
            group: group.clone(),
            workers: 4,
            choice: WorkerChoice::LowestFree,
            prefer_floor_at_most: None,
            holder: holder.into(),
            layout: "L".into(),
            ttl: Duration::from_secs(60),
        };
        let expect = StoreExpectations {
            init: true,
            declared_groups: vec![group.clone()],
            ..StoreExpectations::default()
        };
        let store = Arc::new(MemoryAuthority::new());
        let a = CheckedAuthority::open(store.clone(), node_record(), &expect)
            .await
            .unwrap();
        let incarnation = a.incarnation().cloned().unwrap();
        let leases = a.worker_leases().unwrap();
        let first = leases.acquire(&request("a lease 1")).await.unwrap();
        leases.release(&first, 10).await.unwrap();
        let second = leases.acquire(&request("a lease 2")).await.unwrap();
        assert_eq!(
            node_record().group(&group).unwrap().last_token,
            second.token
        );

        // The same incarnation, without the group: a backup restored from before it.
        let restored = Arc::new(MemoryAuthority::new());
        restored.create_incarnation(&incarnation).await.unwrap();
        let b = CheckedAuthority::open(restored.clone(), node_record(), &expect)
            .await
            .unwrap();
        let err = b
            .worker_leases()
            .unwrap()
            .acquire(&request("a lease 3"))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, LeaseError::Store(e) if e.is_lost() && e.to_string().contains("no record")),
            "{err}"
        );
        // With the group at an older token (one acquisition instead of two): went back.
        restored
            .worker_leases()
            .unwrap()
            .acquire(&request("x lease 1"))
            .await
            .unwrap();
        let err = b
            .worker_leases()
            .unwrap()
            .acquire(&request("a lease 4"))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, LeaseError::Store(e) if e.to_string().contains("below this node's")),
            "{err}"
        );
    }
}
