//! An in-process outage switch: a real [`MemoryAuthority`] that answers
//! [`StoreError::Unavailable`] to everything while it is switched off.
//!
//! For tests of what sits above an authority (a multi authority's members, a node's buffer, its
//! readiness and metrics) where the outage must be turned on and off at an exact point without
//! a server or a proxy. Faults of real backends come from the test kit's proxy instead
//! ([`super::faults`]). It counts the operations it is asked for, so a test can see that a
//! down member is skipped rather than hammered, and it can lose all its data at once
//! ([`SwitchedAuthority::wipe`]: a restored empty backup, a replaced server).

use crate::{Authority, GiveBack, MemoryAuthority, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// See the module docs. Its kind is `memory`; its error says "switched off by the test".
#[derive(Debug, Default)]
pub struct SwitchedAuthority {
    inner: Mutex<Arc<MemoryAuthority>>,
    down: AtomicBool,
    corrupt: AtomicBool,
    calls: AtomicUsize,
}

impl SwitchedAuthority {
    /// Switches the outage on (`true`) or off.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Answers [`StoreError::Corrupt`] to everything (`true`) or not: a hard error, not an
    /// outage.
    pub fn set_corrupt(&self, corrupt: bool) {
        self.corrupt.store(corrupt, Ordering::SeqCst);
    }

    /// How many operations it was asked for, answered or not.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Loses every namespace at once, as a server replaced by an empty one.
    pub fn wipe(&self) {
        *self.inner.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(MemoryAuthority::new());
    }

    fn check(&self) -> Result<Arc<MemoryAuthority>, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.corrupt.load(Ordering::SeqCst) {
            Err(StoreError::Corrupt {
                message: "made corrupt by the test".into(),
            })
        } else if self.down.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable {
                backend: "memory",
                message: "switched off by the test".into(),
            })
        } else {
            Ok(self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone())
        }
    }
}

#[async_trait]
impl Authority for SwitchedAuthority {
    fn kind(&self) -> &'static str {
        "memory"
    }
    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        self.check()?.ensure_namespace(name, spec).await
    }
    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        self.check()?.reserve(name, count).await
    }
    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        self.check()?.state(name).await
    }
    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        self.check()?.list().await
    }
    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        self.check()?.give_back(name, tail).await
    }
    async fn advance(
        &self,
        name: &NamespaceName,
        to: u64,
        why: crate::Advance,
    ) -> Result<crate::Advanced, StoreError> {
        self.check()?.advance(name, to, why).await
    }
    async fn park(
        &self,
        name: &NamespaceName,
        key: &crate::ClaimKey,
        blocks: &[Block],
    ) -> Result<(), StoreError> {
        self.check()?.park(name, key, blocks).await
    }
    async fn claim(
        &self,
        name: &NamespaceName,
        key: &crate::ClaimKey,
    ) -> Result<Vec<Block>, StoreError> {
        self.check()?.claim(name, key).await
    }
}
