//! Unused blocks across a clean restart (docs/design.md invariant 3, `server.kept_blocks`):
//! nodes in process on one shared memory authority, each with a data directory of its own,
//! stopped and started again while another node and an operator act on the store.
//!
//! Each scenario would serve ids twice if a node trusted what it read from its data directory
//! or read an unknown give-back as refused:
//! - a give-back applied by the store whose reply is lost: the tail is burned, never kept;
//! - a rebase or a retirement while the node was stopped: nothing below the rebase, nothing of
//!   the retired namespace;
//! - a copied data directory started twice, and an edited kept file: one claim, the store's
//!   blocks;
//! - the authority down at the stop: `"claimed"` burns (and is unready until the authority
//!   answers), `"unconfirmed"` keeps and serves at once.
//!
//! Every test checks the union of what every node served for duplicates. Time is tokio's
//! paused clock; nothing sleeps to order events.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// The rolled-back store test awaits a node start and the store's opening in one future.
#![recursion_limit = "256"]

use async_trait::async_trait;
use idmint_core::{Block, NamespaceName, SequenceSpec};
use idmint_node::{Authority, IdError, KeepBlocks, KeptBlocks, Node, NodeConfig, ShutdownReport};
use idmint_store::kept::KEPT_FILE;
use idmint_store::{
    Advance, ClaimKey, GiveBack, MemoryAuthority, NamespaceState, Reservation, StoreError,
};
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const CONFIG: &str = "[server]\nauto_create = false\n[namespaces.orders]\nkind = \"sequence\"\n\
                      cache = \"fixed\"\nblock_size = 100\n";

fn orders() -> NamespaceName {
    NamespaceName::new("orders").unwrap()
}

/// A memory authority whose give-backs and parks can be made to apply and then lose their
/// reply (an unknown outcome), and that can be switched off.
#[derive(Debug, Default)]
struct Faulty {
    inner: MemoryAuthority,
    lose_give_back_reply: AtomicBool,
    down: AtomicBool,
    /// Parks and claims go unanswered (the rest works).
    parks_down: AtomicBool,
}

impl Faulty {
    fn down(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::Relaxed) {
            return Err(StoreError::Unavailable {
                backend: "memory",
                message: "switched off by the test".into(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl Authority for Faulty {
    fn kind(&self) -> &'static str {
        "memory"
    }
    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        self.down()?;
        self.inner.ensure_namespace(name, spec).await
    }
    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
        self.down()?;
        self.inner.reserve(name, count).await
    }
    async fn state(&self, name: &NamespaceName) -> Result<Option<NamespaceState>, StoreError> {
        self.down()?;
        self.inner.state(name).await
    }
    async fn list(&self) -> Result<Vec<NamespaceState>, StoreError> {
        self.down()?;
        self.inner.list().await
    }
    async fn give_back(&self, name: &NamespaceName, tail: Block) -> Result<GiveBack, StoreError> {
        self.down()?;
        let applied = self.inner.give_back(name, tail).await?;
        if self.lose_give_back_reply.load(Ordering::Relaxed) {
            return Err(StoreError::Unavailable {
                backend: "memory",
                message: "the give-back's reply was lost".into(),
            });
        }
        Ok(applied)
    }
    async fn advance(
        &self,
        name: &NamespaceName,
        to: u64,
        why: Advance,
    ) -> Result<idmint_store::Advanced, StoreError> {
        self.inner.advance(name, to, why).await
    }
    async fn park(
        &self,
        name: &NamespaceName,
        key: &ClaimKey,
        blocks: &[Block],
    ) -> Result<(), StoreError> {
        self.down()?;
        if self.parks_down.load(Ordering::Relaxed) {
            return Err(StoreError::Unavailable {
                backend: "memory",
                message: "the park's reply was lost".into(),
            });
        }
        self.inner.park(name, key, blocks).await
    }
    async fn claim(&self, name: &NamespaceName, key: &ClaimKey) -> Result<Vec<Block>, StoreError> {
        self.down()?;
        self.inner.claim(name, key).await
    }
}

fn config(dir: Option<&Path>, mode: KeptBlocks) -> NodeConfig {
    let mut config = idmint_node::FileConfig::parse(CONFIG).unwrap().node;
    config.keep_blocks = dir.map(|d| KeepBlocks {
        dir: d.to_owned(),
        authority: "memory (test)".into(),
    });
    config.kept_blocks = mode;
    config
}

async fn start(dir: Option<&Path>, mode: KeptBlocks, a: &Arc<Faulty>) -> Arc<Node> {
    Node::start(config(dir, mode), a.clone()).await.unwrap()
}

/// `count` ids of orders from `node`, or its error.
async fn try_ids(node: &Node, count: u64) -> Result<Vec<u64>, IdError> {
    let ns = node
        .served_namespace("orders")
        .ok_or_else(|| IdError::UnknownNamespace("orders (not set up)".into()))?;
    match ns.ids(count).await? {
        idmint_node::namespace::Ids::U64(v) => Ok(v),
        other => panic!("{other:?}"),
    }
}

async fn ids(node: &Node, count: u64) -> Vec<u64> {
    try_ids(node, count).await.unwrap()
}

/// The ids `node` holds of orders, unserved.
fn held(node: &Node) -> u64 {
    match &*node.served_namespace("orders").unwrap() {
        idmint_node::namespace::Namespace::Sequence(s) => s.supply().snapshot().buffered,
        other => panic!("not a sequence: {other:?}"),
    }
}

/// Node A serves 10 ids and node B reserves after it, so A's tail is refused at its stop and
/// kept: what A held, parked under A's key. Returns A's report and the ids served so far.
async fn a_keeps_90(dir: &Path, a: &Arc<Faulty>) -> (ShutdownReport, Vec<u64>) {
    let node_a = start(Some(dir), KeptBlocks::Claimed, a).await;
    let mut served = ids(&node_a, 10).await;
    assert_eq!(served, (1..=10).collect::<Vec<_>>());
    let node_b = start(None, KeptBlocks::Off, a).await;
    served.extend(ids(&node_b, 5).await);
    let held = held(&node_a);
    let report = node_a.shutdown().await;
    assert_eq!((report.kept, report.given_back), (held, 0), "{report:?}");
    assert!(dir.join(KEPT_FILE).exists());
    node_b.shutdown().await;
    (report, served)
}

fn assert_unique(what: &str, served: &[u64]) {
    let unique: HashSet<u64> = served.iter().copied().collect();
    assert_eq!(unique.len(), served.len(), "{what}: an id was served twice");
}

/// The tail's give-back is applied by the store but its reply is lost: the node burns the
/// tail (it is not kept), so after B was granted those ids, A's restart serves none of them.
#[tokio::test(start_paused = true)]
async fn a_give_back_whose_reply_is_lost_burns_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let a = Arc::new(Faulty::default());
    let node_a = start(Some(dir.path()), KeptBlocks::Claimed, &a).await;
    let mut served = ids(&node_a, 10).await;
    let held = held(&node_a);
    a.lose_give_back_reply.store(true, Ordering::Relaxed);
    let report = node_a.shutdown().await;
    assert_eq!(
        (report.given_back, report.kept, report.burned),
        (0, 0, held),
        "{report:?}"
    );
    assert!(!dir.path().join(KEPT_FILE).exists());
    // The store took the tail back: the next grant starts at 11.
    a.lose_give_back_reply.store(false, Ordering::Relaxed);
    let node_b = start(None, KeptBlocks::Off, &a).await;
    let b = ids(&node_b, 50).await;
    assert_eq!(b[0], 11, "the give-back applied");
    served.extend(b);
    let node_a = start(Some(dir.path()), KeptBlocks::Claimed, &a).await;
    served.extend(ids(&node_a, 100).await);
    assert_unique("lost give-back reply", &served);
    node_a.shutdown().await;
    node_b.shutdown().await;
}

/// Kept blocks come back through the store: the restarted node claims them and serves them
/// first, then continues above everything.
#[tokio::test(start_paused = true)]
async fn kept_blocks_are_claimed_and_served_first() {
    let dir = tempfile::tempdir().unwrap();
    let a = Arc::new(Faulty::default());
    let (report, mut served) = a_keeps_90(dir.path(), &a).await;
    let node_a = start(Some(dir.path()), KeptBlocks::Claimed, &a).await;
    assert!(!dir.path().join(KEPT_FILE).exists());
    let held = report.kept;
    let again = ids(&node_a, held + 5).await;
    let kept: Vec<u64> = (11..11 + held).collect();
    assert_eq!(
        &again[..held as usize],
        kept.as_slice(),
        "the kept ids first"
    );
    let b_end = served.iter().max().copied().unwrap();
    assert!(
        again[held as usize..].iter().all(|&id| id > b_end),
        "{again:?}"
    );
    served.extend(again);
    assert_unique("claimed", &served);
    node_a.shutdown().await;
}

/// `idmint admin rebase --above 1000` while A is stopped: A serves nothing at or below 1000.
/// A retirement: A serves nothing at all (the namespace answers retired).
#[tokio::test(start_paused = true)]
async fn a_rebase_or_retirement_while_stopped_is_not_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let a = Arc::new(Faulty::default());
    let (_, _) = a_keeps_90(dir.path(), &a).await;
    a.advance(&orders(), 1001, Advance::Rebase).await.unwrap();
    let node_a = start(Some(dir.path()), KeptBlocks::Claimed, &a).await;
    let got = ids(&node_a, 30).await;
    assert!(got.iter().all(|&id| id > 1000), "below the rebase: {got:?}");
    node_a.shutdown().await;

    a.advance(&orders(), 0, Advance::Retire).await.unwrap();
    let node_a = start(Some(dir.path()), KeptBlocks::Claimed, &a).await;
    let got = try_ids(&node_a, 1).await;
    assert!(
        matches!(got, Err(IdError::Retired(_))),
        "a retired namespace served {got:?}"
    );
    node_a.shutdown().await;
}

/// The data directory copied while A was stopped, and both copies started: one claim wins;
/// the other serves fresh ids. An edited kept file (another node's range in it) serves only
/// what the store parked under its key.
#[tokio::test(start_paused = true)]
async fn a_copied_or_edited_data_directory_serves_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let a = Arc::new(Faulty::default());
    let (_, mut served) = a_keeps_90(dir.path(), &a).await;
    let copy = tempfile::tempdir().unwrap();
    std::fs::copy(dir.path().join(KEPT_FILE), copy.path().join(KEPT_FILE)).unwrap();
    // The copy's file names B's ids [101, 106) too.
    let path = copy.path().join(KEPT_FILE);
    let mut file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let blocks = &mut file["namespaces"][0]["blocks"];
    let end = blocks[0][1].as_u64().unwrap();
    *blocks = serde_json::json!([[11, end + 5]]);
    std::fs::write(&path, serde_json::to_vec(&file).unwrap()).unwrap();
    let node_a = start(Some(dir.path()), KeptBlocks::Claimed, &a).await;
    let node_copy = start(Some(copy.path()), KeptBlocks::Claimed, &a).await;
    served.extend(ids(&node_a, 150).await);
    served.extend(ids(&node_copy, 150).await);
    assert_unique("copied data directory", &served);
    node_a.shutdown().await;
    node_copy.shutdown().await;
}

/// The authority does not answer the park at the stop: with `"claimed"` the unused ids are
/// burned, and the restart during an outage serves nothing (the namespace is not set up); with
/// `"unconfirmed"` they are kept, and served at once during the outage. Either way, nothing
/// twice once the authority is back.
#[tokio::test(start_paused = true)]
async fn a_park_without_answer_burns_or_serves_unconfirmed_as_configured() {
    for mode in [KeptBlocks::Claimed, KeptBlocks::Unconfirmed] {
        let dir = tempfile::tempdir().unwrap();
        let a = Arc::new(Faulty::default());
        let node_a = start(Some(dir.path()), mode, &a).await;
        let mut served = ids(&node_a, 10).await;
        let node_b = start(None, KeptBlocks::Off, &a).await;
        served.extend(ids(&node_b, 5).await);
        let held = held(&node_a);
        a.parks_down.store(true, Ordering::Relaxed);
        let report = node_a.shutdown().await;
        a.down.store(true, Ordering::Relaxed);
        let node_a = start(Some(dir.path()), mode, &a).await;
        match mode {
            KeptBlocks::Claimed => {
                assert_eq!((report.kept, report.burned), (0, held), "{report:?}");
                assert!(
                    try_ids(&node_a, 1).await.is_err(),
                    "served during the outage"
                );
            }
            _ => {
                assert_eq!((report.kept, report.burned), (held, 0), "{report:?}");
                served.extend(ids(&node_a, held).await);
            }
        }
        a.down.store(false, Ordering::Relaxed);
        a.parks_down.store(false, Ordering::Relaxed);
        served.extend(ids(&node_b, 200).await);
        node_b.shutdown().await;
        assert_unique("a park without answer", &served);
        node_a.shutdown().await;
    }
}

/// Blocks the store never parked (a kept file without a claim key, as an unconfirmed node
/// writes when its park has no answer) are not served by a node in the default mode.
#[tokio::test(start_paused = true)]
async fn unparked_blocks_are_not_served_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let a = Arc::new(Faulty::default());
    let node_a = start(Some(dir.path()), KeptBlocks::Unconfirmed, &a).await;
    let mut served = ids(&node_a, 10).await;
    let node_b = start(None, KeptBlocks::Off, &a).await;
    served.extend(ids(&node_b, 5).await);
    let held = held(&node_a);
    a.parks_down.store(true, Ordering::Relaxed);
    let report = node_a.shutdown().await;
    assert_eq!(report.kept, held, "{report:?}");
    a.parks_down.store(false, Ordering::Relaxed);
    let node_a = start(Some(dir.path()), KeptBlocks::Claimed, &a).await;
    let again = ids(&node_a, 20).await;
    assert!(again[0] > 10 + held, "served unparked kept ids: {again:?}");
    served.extend(again);
    assert_unique("unparked", &served);
    node_a.shutdown().await;
    node_b.shutdown().await;
}

/// A store rolled back below what the node saw (a point-in-time restore of the file store)
/// while the node was stopped with parked blocks: the restart refuses the namespace as lost,
/// before any kept id is served, as it would without kept blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_rolled_back_while_stopped_serves_no_kept_id() {
    let data = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    let text = format!(
        "[authority]\nkind = \"file\"\npath = {:?}\n{CONFIG}",
        store.path().display().to_string()
    );
    let file = idmint_node::FileConfig::parse(&text).unwrap();
    let mut node_config = file.node.clone();
    node_config.keep_blocks = Some(KeepBlocks {
        dir: data.path().to_owned(),
        authority: file.authority.to_string(),
    });
    let open = |init: bool| {
        let file = &file;
        let data = data.path().to_owned();
        async move { idmint_node::open_store(file, &data, init).await }
    };
    // A first run: one id, a clean stop (its tail goes back).
    let authority = open(true).await.unwrap();
    let node = Node::start(node_config.clone(), authority).await.unwrap();
    ids(&node, 1).await;
    node.shutdown().await;
    drop(node);
    let snapshot = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(store.path()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), snapshot.path().join(entry.file_name())).unwrap();
    }
    // A second run; ids granted after its block (as to another node) make its clean stop
    // park the tail instead of handing it back.
    let authority = open(false).await.unwrap();
    let node = Node::start(node_config.clone(), authority.clone())
        .await
        .unwrap();
    ids(&node, 10).await;
    authority.reserve(&orders(), 5).await.unwrap();
    let report = node.shutdown().await;
    drop(authority);
    assert!(report.kept > 0, "{report:?}");
    drop(node);
    // The store restored from before the second run.
    for entry in std::fs::read_dir(snapshot.path()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), store.path().join(entry.file_name())).unwrap();
    }
    let authority = open(false).await.unwrap();
    let started = Node::start(node_config, authority).await;
    let error = started.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        error.contains("lost"),
        "a store rolled back below the node record must be refused before any kept id is served: {error:?}"
    );
}
