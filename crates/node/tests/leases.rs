//! Snowflake namespaces under worker leases (issue 10; docs/uniqueness.md, "Snowflake
//! namespaces"), node against a memory authority whose leases expire by the same injected
//! clock as the nodes' generators.
//!
//! The clock follows tokio's paused time (monotonic) plus a wall offset the test steps, so a
//! test moves time by awaiting tokio timers and steps the wall clock back "while a node was
//! down" without sleeping on real time. What is checked: two nodes never share a worker id and
//! a third configured with a taken one refuses to start naming the holder; a node restarted
//! after its clock was stepped back never repeats a timestamp (it waits for a near floor,
//! refuses a far one naming both times, and in lease mode takes a never-used worker id
//! instead); a node whose renewals fail stops issuing before its lease can expire, and once the
//! worker id was taken over it never issues under it again but acquires another.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use idmint_core::{Block, Clock, Layout, NamespaceName, SequenceSpec};
use idmint_node::namespace::{Ids, Namespace};
use idmint_node::{IdError, KindConfig, LeaseSettings, Node, NodeConfig, WorkerConfig};
use idmint_store::lease::{GroupRecord, LeaseError, WorkerSlot};
use idmint_store::{
    Authority, GiveBack, LeaseRequest, MemoryAuthority, NamespaceState, Reservation, StoreError,
    WorkerLease, WorkerLeases,
};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const START_WALL_MS: u64 = 1_780_000_000_000;

/// Monotonic time = tokio's (paused) time; wall time = a start plus that plus a step offset.
#[derive(Debug)]
struct TestClock {
    origin: tokio::time::Instant,
    offset_ms: AtomicI64,
}

impl TestClock {
    fn new() -> Arc<Self> {
        Arc::new(TestClock {
            origin: tokio::time::Instant::now(),
            offset_ms: AtomicI64::new(0),
        })
    }
    fn step_wall_ms(&self, delta: i64) {
        self.offset_ms.fetch_add(delta, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn wall_nanos(&self) -> u64 {
        let base = START_WALL_MS as i64 + self.offset_ms.load(Ordering::SeqCst);
        (base as u64) * 1_000_000 + self.monotonic_nanos()
    }
    fn monotonic_nanos(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

/// A memory authority whose lease operations can be switched off (answering `Unavailable`).
#[derive(Debug)]
struct FlakyLeases {
    inner: Arc<MemoryAuthority>,
    down: AtomicBool,
}

impl FlakyLeases {
    fn check(&self) -> Result<(), LeaseError> {
        if self.down.load(Ordering::SeqCst) {
            Err(LeaseError::Store(StoreError::Unavailable {
                backend: "memory",
                message: "switched off by the test".into(),
            }))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl Authority for FlakyLeases {
    fn kind(&self) -> &'static str {
        "memory"
    }
    fn worker_leases(&self) -> Option<&dyn WorkerLeases> {
        Some(self)
    }
    async fn ensure_namespace(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
    ) -> Result<NamespaceState, StoreError> {
        self.inner.ensure_namespace(name, spec).await
    }
    async fn reserve(&self, name: &NamespaceName, count: u64) -> Result<Reservation, StoreError> {
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

#[async_trait]
impl WorkerLeases for FlakyLeases {
    async fn acquire(&self, request: &LeaseRequest) -> Result<WorkerLease, LeaseError> {
        self.check()?;
        self.inner.acquire(request).await
    }
    async fn renew(&self, lease: &WorkerLease, floor: u64) -> Result<WorkerLease, LeaseError> {
        self.check()?;
        self.inner.renew(lease, floor).await
    }
    async fn release(&self, lease: &WorkerLease, floor: u64) -> Result<(), LeaseError> {
        self.check()?;
        self.inner.release(lease, floor).await
    }
    async fn group(
        &self,
        group: &NamespaceName,
    ) -> Result<Option<(GroupRecord, Vec<WorkerSlot>)>, LeaseError> {
        self.check()?;
        self.inner.group(group).await
    }
}

fn config(worker: WorkerConfig) -> NodeConfig {
    let mut config = NodeConfig {
        auto_create: false,
        leases: LeaseSettings::default(),
        ..NodeConfig::default()
    };
    config.namespaces.insert(
        NamespaceName::new("events").unwrap(),
        KindConfig::Snowflake {
            layout: Layout::twitter(),
            worker,
            group: None,
        },
    );
    config
}

async fn start(
    worker: WorkerConfig,
    authority: Arc<dyn Authority>,
    clock: &Arc<TestClock>,
) -> Result<Arc<Node>, idmint_node::NodeError> {
    Node::start_with_clock(config(worker), authority, clock.clone()).await
}

async fn events(node: &Node) -> Arc<Namespace> {
    node.namespace("events").await.unwrap()
}

async fn take(ns: &Namespace, count: u64) -> Result<Vec<u64>, IdError> {
    match ns.ids(count).await? {
        Ids::U64(ids) => Ok(ids),
        other => panic!("not u64 ids: {other:?}"),
    }
}

fn worker_of(id: u64) -> u64 {
    Layout::twitter().decode(id).unwrap().parts.node
}

fn unix_ms_of(id: u64) -> u64 {
    Layout::twitter().decode(id).unwrap().unix_millis()
}

/// Two nodes take different worker ids; a third configured with a taken one refuses to start
/// and names the holder (after waiting once for it to expire, since it has this host's name).
#[tokio::test(start_paused = true)]
async fn two_nodes_never_share_a_worker_id() {
    let clock = TestClock::new();
    let authority: Arc<dyn Authority> = Arc::new(MemoryAuthority::with_clock(clock.clone()));
    let a = start(WorkerConfig::Lease, authority.clone(), &clock)
        .await
        .unwrap();
    let b = start(WorkerConfig::Lease, authority.clone(), &clock)
        .await
        .unwrap();
    let (na, nb) = (events(&a).await, events(&b).await);
    let mut seen = HashSet::new();
    for _ in 0..50 {
        for ns in [&na, &nb] {
            for id in take(ns, 1000).await.unwrap() {
                assert!(seen.insert(id), "duplicate id {id}");
            }
        }
        tokio::time::sleep(Duration::from_millis(700)).await; // renewals run meanwhile
    }
    let wa = worker_of(take(&na, 1).await.unwrap()[0]);
    let wb = worker_of(take(&nb, 1).await.unwrap()[0]);
    assert_eq!((wa, wb), (0, 1));

    let err = start(WorkerConfig::Fixed(1), authority.clone(), &clock)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("worker 1 of group events is held by"), "{err}");
    assert!(
        err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    // The holders kept issuing while the third node waited and gave up.
    take(&nb, 10).await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
}

/// A node restarted after its clock was stepped back never issues below the floor of its
/// worker id: a near floor is waited for, a far one refused with both times named; in lease
/// mode the node takes a worker id it can use at once instead.
#[tokio::test(start_paused = true)]
async fn a_clock_stepped_back_while_down_never_repeats_a_timestamp() {
    let clock = TestClock::new();
    let authority: Arc<dyn Authority> = Arc::new(MemoryAuthority::with_clock(clock.clone()));
    let first = start(WorkerConfig::Fixed(0), authority.clone(), &clock)
        .await
        .unwrap();
    let before = take(&*events(&first).await, 5000).await.unwrap();
    let last = *before.iter().max().unwrap();
    first.shutdown().await;

    clock.step_wall_ms(-1_000);
    let second = start(WorkerConfig::Fixed(0), authority.clone(), &clock)
        .await
        .unwrap();
    let after = take(&*events(&second).await, 5000).await.unwrap();
    assert!(
        after.iter().all(|&id| id > last),
        "an id at or below {last} after the restart"
    );
    assert!(unix_ms_of(after[0]) > unix_ms_of(last));
    let last = *after.iter().max().unwrap();
    second.shutdown().await;

    clock.step_wall_ms(-30_000);
    let err = start(WorkerConfig::Fixed(0), authority.clone(), &clock)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("has issued ids up to"), "{err}");
    assert!(err.contains("this clock reads"), "{err}");
    assert!(err.contains("stepped back"), "{err}");

    let leased = start(WorkerConfig::Lease, authority.clone(), &clock)
        .await
        .unwrap();
    let ids = take(&*events(&leased).await, 100).await.unwrap();
    assert!(
        ids.iter().all(|&id| worker_of(id) == 1),
        "a never-used worker id"
    );
    assert!(!ids.contains(&last));
    leased.shutdown().await;
}

/// Renewals failing: the node stops issuing before its lease could expire (503 naming the
/// lease); another node takes the worker id over after expiry, starting above the floor; the
/// first node's renewal is then superseded, it never issues under that worker id again, and it
/// acquires another.
#[tokio::test(start_paused = true)]
async fn a_node_that_cannot_renew_stops_and_a_lost_lease_is_never_used_again() {
    let clock = TestClock::new();
    let memory = Arc::new(MemoryAuthority::with_clock(clock.clone()));
    let flaky = Arc::new(FlakyLeases {
        inner: memory.clone(),
        down: AtomicBool::new(false),
    });
    let a = start(WorkerConfig::Lease, flaky.clone(), &clock)
        .await
        .unwrap();
    let na = events(&a).await;
    let mut a_ids = take(&na, 1000).await.unwrap();
    assert!(a_ids.iter().all(|&id| worker_of(id) == 0));

    flaky.down.store(true, Ordering::SeqCst);
    let stopped_at = tokio::time::Instant::now();
    let refusal = loop {
        match take(&na, 10).await {
            Ok(ids) => a_ids.extend(ids),
            Err(e) => break e,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            stopped_at.elapsed() < Duration::from_secs(10),
            "still issuing"
        );
    };
    assert!(
        matches!(refusal, IdError::Unavailable { .. }),
        "{refusal:?}"
    );
    assert!(
        refusal.to_string().contains("worker lease of group events"),
        "{refusal}"
    );
    // It stopped before the authority could have let the lease go (TTL 10 s after the last
    // renewal, which was at most a third of the TTL before the switch).
    assert!(
        stopped_at.elapsed() <= Duration::from_secs(8),
        "{:?}",
        stopped_at.elapsed()
    );
    let a_max = *a_ids.iter().max().unwrap();

    // B takes worker 0 over once the authority says A's lease expired.
    let b = loop {
        match start(WorkerConfig::Fixed(0), memory.clone(), &clock).await {
            Ok(b) => break b,
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    };
    let b_ids = take(&*events(&b).await, 1000).await.unwrap();
    assert!(b_ids.iter().all(|&id| id > a_max && worker_of(id) == 0));

    // A's authority comes back: its renewal is superseded, it acquires worker 1.
    flaky.down.store(false, Ordering::SeqCst);
    let a_again = loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if let Ok(ids) = take(&na, 10).await {
            break ids;
        }
    };
    assert!(a_again.iter().all(|&id| worker_of(id) == 1), "{a_again:?}");
    let mut all = HashSet::new();
    for id in a_ids.iter().chain(&b_ids).chain(&a_again) {
        assert!(all.insert(*id), "duplicate {id}");
    }
    let info = serde_json::to_value(na.info(std::time::UNIX_EPOCH)).unwrap();
    assert_eq!(info["state"]["worker_lease"]["status"], "held", "{info}");
    a.shutdown().await;
    b.shutdown().await;
}
