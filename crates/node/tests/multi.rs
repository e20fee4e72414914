//! A node on a multi authority whose members go down and come back: `/readyz` and `/metrics`
//! say which member is down, and the node stays ready while one member is up.
//!
//! The members are real [`MemoryAuthority`]s behind a switch that makes them answer
//! `Unavailable`; the multi authority's back-off runs on a [`ManualClock`] the test advances, so
//! nothing sleeps.

#![allow(clippy::unwrap_used)]

mod support;

use async_trait::async_trait;
use idmint_core::{Block, ManualClock, NamespaceName, SequenceSpec};
use idmint_node::{Authority, FileConfig};
use idmint_store::StoreError;
use idmint_store::{GiveBack, MemoryAuthority, MultiAuthority, NamespaceState, Reservation};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use support::TestNode;

/// A member that can be switched off.
#[derive(Debug, Default)]
struct Switchable {
    inner: MemoryAuthority,
    down: AtomicBool,
}

impl Switchable {
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
impl Authority for Switchable {
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

/// Regression (a member outage left no trace, and `/readyz` could not say which member was
/// down): with one member down the node stays ready and names it, in `/readyz` and in
/// `idmint_authority_member_up`; with both down it is not ready; once they answer again (after
/// the back-off) it is ready with both up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_and_metrics_show_each_member() {
    let clock = Arc::new(ManualClock::at_unix_millis(1_000));
    let (a, b) = (
        Arc::new(Switchable::default()),
        Arc::new(Switchable::default()),
    );
    let multi = MultiAuthority::with_clock(
        vec![(a.clone() as Arc<dyn Authority>, 1), (b.clone(), 0)],
        clock.clone(),
    )
    .unwrap();
    let config = FileConfig::parse("[defaults]\nstep = 2\n").unwrap().node;
    let node = TestNode::start(config, Arc::new(multi)).await;

    let (status, ready) = node.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["authority"], "multi");
    assert_eq!(ready["members"][0]["number"], 1, "{ready}");
    assert_eq!(ready["members"][0]["kind"], "memory", "{ready}");
    assert_eq!(ready["members"][0]["offset"], 1, "{ready}");
    assert_eq!(ready["members"][0]["up"], true, "{ready}");
    assert_eq!(ready["members"][1]["up"], true, "{ready}");

    a.down.store(true, Ordering::SeqCst);
    let (status, ready) = node.get("/readyz").await;
    assert_eq!(status, 200, "one member up is ready: {ready}");
    assert_eq!(ready["members"][0]["up"], false, "{ready}");
    let error = ready["members"][0]["last_error"].as_str().unwrap();
    assert!(error.contains("switched off"), "{ready}");
    assert_eq!(ready["members"][1]["up"], true, "{ready}");
    let (_, metrics) = node.text("/metrics").await;
    for line in [
        "idmint_authority_member_up{member=\"1\",kind=\"memory\",offset=\"1\"} 0\n",
        "idmint_authority_member_up{member=\"2\",kind=\"memory\",offset=\"0\"} 1\n",
    ] {
        assert!(metrics.contains(line), "{line}{metrics}");
    }

    b.down.store(true, Ordering::SeqCst);
    let (status, body) = node.get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "authority_unavailable", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("member 1 (memory)") && message.contains("member 2 (memory)"),
        "{message}"
    );

    a.down.store(false, Ordering::SeqCst);
    b.down.store(false, Ordering::SeqCst);
    clock.advance_millis(1_000);
    let (status, ready) = node.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["members"][0]["up"], true, "{ready}");
    assert!(ready["members"][0].get("last_error").is_none(), "{ready}");
    let (_, metrics) = node.text("/metrics").await;
    assert!(
        metrics
            .contains("idmint_authority_member_up{member=\"1\",kind=\"memory\",offset=\"1\"} 1\n"),
        "{metrics}"
    );
    node.stop().await;
}

/// Regression (the "sequences that cannot repeat" issue, finding 4): with a multi authority and
/// a buffered cache, one answer spanning two members' blocks came out as `[…, 47, 49, 2, 4, …]`,
/// against the documented "ids of one answer are strictly increasing".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_spanning_two_members_is_increasing() {
    let multi = MultiAuthority::new(vec![
        (Arc::new(MemoryAuthority::new()) as Arc<dyn Authority>, 1),
        (Arc::new(MemoryAuthority::new()), 0),
    ])
    .unwrap();
    let config = FileConfig::parse(
        "[namespaces.orders]\nkind = \"sequence\"\nstep = 2\ncache = \"fixed\"\nblock_size = 10\n",
    )
    .unwrap()
    .node;
    let node = TestNode::start(config, Arc::new(multi)).await;
    let mut all = Vec::new();
    for _ in 0..20 {
        let (status, v) = node.get("/v1/ids/orders?count=15").await;
        assert_eq!(status, 200, "{v}");
        let ids: Vec<u64> = v["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_str().unwrap().parse().unwrap())
            .collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "one answer is not increasing: {ids:?}"
        );
        all.extend(ids);
    }
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "an id was handed out twice");
}
