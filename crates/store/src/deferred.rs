//! [`DeferredAuthority`]: the authority of a node that started while its store did not answer.
//! It answers [`StoreError::Unavailable`] (with the latest reason) to everything until the
//! node's retry loop hands it the authority, connected and checked against the node record
//! ([`DeferredAuthority::connected`]); from then on it passes every call through.
//!
//! Why: a node whose store is down at start should start, listen, report not ready and retry,
//! not exit (a crash loop under systemd's `Restart=on-failure` or Kubernetes); and with blocks
//! kept at its last clean stop ([`crate::kept`]) it can serve meanwhile.
//!
//! Invariants: nothing reaches a store before the store passed the same checks as at a normal
//! start (the caller only sets what [`crate::CheckedAuthority::open`] returned); the authority is
//! set once and never replaced; no lock is held across `.await` (the slot is a `OnceLock`, the
//! reason a short `std::sync::Mutex`).
//!
//! What it does not do: retry (the node does, with its backoff), or decide which failures may
//! be deferred (only a store that does not answer, on a node that ran on it before: the node
//! decides).

use crate::audit::{AuditEntry, AuditEvent, AuditLog};
use crate::lease::{GroupRecord, LeaseError, LeaseRequest, WorkerLease, WorkerLeases, WorkerSlot};
use crate::{
    Advance, Advanced, Authority, ClaimKey, GiveBack, Incarnation, Members, NamespaceState,
    Reservation, StoreError,
};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec};
use std::sync::{Arc, Mutex, OnceLock};

/// An authority not connected yet. See the module docs.
#[derive(Debug)]
pub struct DeferredAuthority {
    kind: &'static str,
    inner: OnceLock<Arc<dyn Authority>>,
    reason: Mutex<String>,
}

impl DeferredAuthority {
    /// A `kind` authority (the configured kind, as [`Authority::kind`] names it) that is not
    /// connected yet, because of `reason`.
    pub fn new(kind: &'static str, reason: impl Into<String>) -> Self {
        DeferredAuthority {
            kind,
            inner: OnceLock::new(),
            reason: Mutex::new(reason.into()),
        }
    }

    /// The authority is connected and checked: every call goes to it from now on. Returns
    /// `false` (and changes nothing) if one was set before.
    pub fn connected(&self, authority: Arc<dyn Authority>) -> bool {
        self.inner.set(authority).is_ok()
    }

    /// Whether [`DeferredAuthority::connected`] was called.
    pub fn is_connected(&self) -> bool {
        self.inner.get().is_some()
    }

    /// Records why the latest try to connect failed (what calls answer meanwhile).
    pub fn failed(&self, reason: impl Into<String>) {
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = reason.into();
    }

    fn get(&self) -> Result<&Arc<dyn Authority>, StoreError> {
        self.inner.get().ok_or_else(|| StoreError::Unavailable {
            backend: self.kind,
            message: format!(
                "not connected since the node started: {}",
                self.reason.lock().unwrap_or_else(|p| p.into_inner())
            ),
        })
    }

    fn leases(&self) -> Result<&dyn WorkerLeases, LeaseError> {
        let inner = self.get()?;
        inner
            .worker_leases()
            .ok_or(LeaseError::Store(StoreError::NotSupported {
                backend: self.kind,
                what: "worker leases",
            }))
    }

    fn audit(&self) -> Result<&dyn AuditLog, StoreError> {
        let inner = self.get()?;
        inner.audit_log().ok_or(StoreError::NotSupported {
            backend: self.kind,
            what: "an audit ledger",
        })
    }
}

#[async_trait]
impl Authority for DeferredAuthority {
    fn kind(&self) -> &'static str {
        self.inner.get().map_or(self.kind, |a| a.kind())
    }

    fn members(&self) -> Option<&dyn Members> {
        self.inner.get().and_then(|a| a.members())
    }

    fn residues(&self, spec: &SequenceSpec) -> Vec<u64> {
        match self.inner.get() {
            Some(a) => a.residues(spec),
            None => vec![spec.offset()],
        }
    }

    fn note_floor(&self, name: &NamespaceName, floor: u64) {
        if let Some(a) = self.inner.get() {
            a.note_floor(name, floor);
        }
    }

    async fn flush(&self) -> Result<(), StoreError> {
        match self.inner.get() {
            Some(a) => a.flush().await,
            None => Ok(()),
        }
    }

    fn reports_store_watermark(&self) -> bool {
        self.inner.get().is_none_or(|a| a.reports_store_watermark())
    }

    fn worker_leases(&self) -> Option<&dyn WorkerLeases> {
        Some(self)
    }

    fn audit_log(&self) -> Option<&dyn AuditLog> {
        Some(self)
    }

    async fn incarnation(&self) -> Result<Option<Incarnation>, StoreError> {
        self.get()?.incarnation().await
    }

    async fn create_incarnation(&self, candidate: &Incarnation) -> Result<Incarnation, StoreError> {
        self.get()?.create_incarnation(candidate).await
    }

    async fn advance(
        &self,
        name: &NamespaceName,
        to: u64,
        why: Advance,
    ) -> Result<Advanced, StoreError> {
        self.get()?.advance(name, to, why).await
    }

    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        self.get()?.ensure_namespace(name, spec).await
    }

    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        self.get()?.reserve(name, count).await
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        self.get()?.state(name).await
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        self.get()?.list().await
    }

    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        self.get()?.give_back(name, tail).await
    }

    async fn park(
        &self,
        name: &NamespaceName,
        key: &ClaimKey,
        blocks: &[Block],
    ) -> Result<(), StoreError> {
        self.get()?.park(name, key, blocks).await
    }

    async fn claim(&self, name: &NamespaceName, key: &ClaimKey) -> Result<Vec<Block>, StoreError> {
        self.get()?.claim(name, key).await
    }
}

#[async_trait]
impl WorkerLeases for DeferredAuthority {
    async fn acquire(&self, request: &LeaseRequest) -> Result<WorkerLease, LeaseError> {
        self.leases()?.acquire(request).await
    }

    async fn renew(
        &self,
        lease: &WorkerLease,
        floor_unix_ms: u64,
    ) -> Result<WorkerLease, LeaseError> {
        self.leases()?.renew(lease, floor_unix_ms).await
    }

    async fn release(&self, lease: &WorkerLease, floor_unix_ms: u64) -> Result<(), LeaseError> {
        self.leases()?.release(lease, floor_unix_ms).await
    }

    async fn group(
        &self,
        group: &NamespaceName,
    ) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, LeaseError> {
        self.leases()?.group(group).await
    }
}

#[async_trait]
impl AuditLog for DeferredAuthority {
    async fn subjects(&self) -> Result<Vec<NamespaceName>, StoreError> {
        self.audit()?.subjects().await
    }

    async fn entries(
        &self,
        subject: &NamespaceName,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.audit()?.entries(subject, after, limit).await
    }

    async fn now_unix_ms(&self) -> Result<u64, StoreError> {
        self.audit()?.now_unix_ms().await
    }

    async fn fold(
        &self,
        subject: &NamespaceName,
        through: u64,
        checkpoint: AuditEvent,
    ) -> Result<u64, StoreError> {
        self.audit()?.fold(subject, through, checkpoint).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::MemoryAuthority;

    #[tokio::test]
    async fn unavailable_with_the_reason_until_connected_then_passes_through() {
        let deferred = DeferredAuthority::new("postgres", "connection refused");
        let name = NamespaceName::new("orders").unwrap();
        let err = deferred.reserve(&name, 10).await.unwrap_err();
        assert!(err.is_unavailable(), "{err}");
        assert!(err.to_string().contains("connection refused"), "{err}");
        deferred.failed("timed out");
        let err = deferred.list().await.unwrap_err();
        assert!(err.to_string().contains("timed out"), "{err}");
        let lease = deferred
            .worker_leases()
            .unwrap()
            .group(&name)
            .await
            .unwrap_err();
        assert!(lease.is_unavailable(), "{lease}");
        assert_eq!(deferred.kind(), "postgres");
        assert!(!deferred.is_connected());

        let memory: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
        assert!(deferred.connected(memory.clone()));
        assert!(!deferred.connected(memory), "set once");
        deferred
            .ensure_namespace(&name, SequenceSpec::default_64())
            .await
            .unwrap();
        let r = deferred.reserve(&name, 10).await.unwrap();
        assert_eq!(r.block.start(), 1);
        assert_eq!(deferred.kind(), "memory");
    }
}
