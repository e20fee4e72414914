//! An authority that holds requests in flight for as long as a test wants: reservations of
//! namespaces whose name starts with `held` wait until the test opens their gate
//! ([`Gated::open`]), each reported when it starts, and each dropped unfinished counted
//! ([`Gated::cut`]). Every other namespace, and everything else, is a memory authority's.

use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec};
use idmint_node::Authority;
use idmint_store::{GiveBack, MemoryAuthority, NamespaceState, Reservation, StoreError};
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// See the module docs.
#[derive(Debug)]
pub struct Gated {
    inner: MemoryAuthority,
    started: mpsc::UnboundedSender<String>,
    open: watch::Sender<HashSet<String>>,
    cut: Arc<AtomicUsize>,
}

/// Counts a held reservation dropped before its gate opened.
struct Unfinished(Arc<AtomicUsize>, bool);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Gated {
    /// The authority, and the names of held reservations as they start.
    pub fn new() -> (Arc<Gated>, mpsc::UnboundedReceiver<String>) {
        let (started, rx) = mpsc::unbounded_channel();
        let gated = Gated {
            inner: MemoryAuthority::new(),
            started,
            open: watch::Sender::new(HashSet::new()),
            cut: Arc::new(AtomicUsize::new(0)),
        };
        (Arc::new(gated), rx)
    }

    /// Lets the held reservations of `name` finish.
    pub fn open(&self, name: &str) {
        self.open.send_modify(|open| {
            open.insert(name.to_owned());
        });
    }

    /// How many held reservations were dropped unfinished (their request cut).
    pub fn cut(&self) -> usize {
        self.cut.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Authority for Gated {
    fn kind(&self) -> &'static str {
        "gated"
    }

    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        self.inner.ensure_namespace(name, spec).await
    }

    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        if name.as_str().starts_with("held") {
            let mut unfinished = Unfinished(self.cut.clone(), false);
            let _ = self.started.send(name.to_string());
            let mut open = self.open.subscribe();
            let _ = open.wait_for(|open| open.contains(name.as_str())).await;
            unfinished.1 = true;
        }
        self.inner.reserve(name, count).await
    }

    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        self.inner.state(name).await
    }

    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        self.inner.list().await
    }

    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        self.inner.give_back(name, tail).await
    }
}
