//! The in-memory authority, for tests.
//!
//! Every operation runs under one `std::sync::Mutex`, taken and released inside the call (never
//! across an `.await`), so operations are atomic and linearizable. "Durable" here means "recorded
//! for as long as this value lives": nothing survives the process, and two `MemoryAuthority`
//! values share nothing. Use it for unit tests, never for a real node.

use crate::{ops, Authority, GiveBack, NamespaceState, Reservation, StoreError};
use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// An authority held in memory. Clone the `Arc` it is held in to share it.
#[derive(Debug, Default)]
pub struct MemoryAuthority {
    namespaces: Mutex<BTreeMap<NamespaceName, NamespaceState>>,
}

impl MemoryAuthority {
    /// An empty authority.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<NamespaceName, NamespaceState>> {
        // Every operation computes its result before it writes, and each write is a single
        // assignment, so the map is consistent even if a holder panicked: ignore the poison.
        self.namespaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl Authority for MemoryAuthority {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        let mut map = self.lock();
        match ops::ensure(name, map.get(name), spec)? {
            Some(created) => {
                map.insert(name.clone(), created.clone());
                Ok(created)
            }
            None => map
                .get(name)
                .cloned()
                .ok_or_else(|| StoreError::UnknownNamespace { name: name.clone() }),
        }
    }

    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        let mut map = self.lock();
        let state = map
            .get_mut(name)
            .ok_or_else(|| StoreError::UnknownNamespace { name: name.clone() })?;
        let block = ops::reserve(state, count)?;
        state.watermark = block.end();
        Ok(Reservation {
            block,
            watermark: block.end(),
        })
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        Ok(self.lock().get(name).cloned())
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        // A BTreeMap iterates in key order: sorted by name.
        Ok(self.lock().values().cloned().collect())
    }

    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        let mut map = self.lock();
        let state = map
            .get_mut(name)
            .ok_or_else(|| StoreError::UnknownNamespace { name: name.clone() })?;
        match ops::give_back(state, tail)? {
            Ok(watermark) => {
                state.watermark = watermark;
                Ok(GiveBack::Returned)
            }
            Err(refused) => Ok(refused),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_the_conformance_suite() {
        let authority = Arc::new(MemoryAuthority::new());
        // A memory authority "reopens" as itself: its state lives as long as the value.
        crate::conformance::run_all(move || {
            let authority = authority.clone();
            async move { authority as Arc<dyn Authority> }
        })
        .await;
    }

    #[tokio::test]
    async fn reserve_moves_the_watermark() {
        let a = MemoryAuthority::new();
        let name = NamespaceName::new("m").unwrap();
        a.ensure_namespace(&name, SequenceSpec::default_64())
            .await
            .unwrap();
        let r = a.reserve(&name, 10).await.unwrap();
        assert_eq!((r.block.start(), r.block.end(), r.watermark), (1, 11, 11));
        assert_eq!(a.state(&name).await.unwrap().unwrap().watermark, 11);
    }
}
