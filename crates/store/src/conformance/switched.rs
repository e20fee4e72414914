//! An in-process outage switch: a real [`MemoryAuthority`] that answers
//! [`StoreError::Unavailable`] to everything while it is switched off.
//!
//! For tests of what sits above an authority (a multi authority's members, a node's buffer, its
//! readiness and metrics) where the outage must be turned on and off at an exact point without
//! a server or a proxy. Faults of real backends come from the test kit's proxy instead
//! ([`super::faults`]). It counts the reservations it is asked for, so a test can see that a
//! down member is skipped rather than hammered.

use crate::{Authority, GiveBack, MemoryAuthority, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// See the module docs. Its kind is `memory`; its error says "switched off by the test".
#[derive(Debug, Default)]
pub struct SwitchedAuthority {
    inner: MemoryAuthority,
    down: AtomicBool,
    reserve_calls: AtomicUsize,
}

impl SwitchedAuthority {
    /// Switches the outage on (`true`) or off.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// How many reservations it was asked for, answered or not.
    pub fn reserve_calls(&self) -> usize {
        self.reserve_calls.load(Ordering::SeqCst)
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable {
                backend: "memory",
                message: "switched off by the test".into(),
            })
        } else {
            Ok(())
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
        self.check()?;
        self.inner.ensure_namespace(name, spec).await
    }
    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        self.reserve_calls.fetch_add(1, Ordering::SeqCst);
        self.check()?;
        self.inner.reserve(name, count).await
    }
    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        self.check()?;
        self.inner.state(name).await
    }
    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        self.check()?;
        self.inner.list().await
    }
    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        self.check()?;
        self.inner.give_back(name, tail).await
    }
}
