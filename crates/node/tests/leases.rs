//! Snowflake namespaces under worker leases (docs/uniqueness.md, "Snowflake
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
            shards: None,
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
    node.served_namespace("events").unwrap()
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

/// GET `path` on `node`'s router (in process, on the test's paused clock): status and JSON.
async fn get_json(node: &Arc<Node>, path: &str) -> (u16, serde_json::Value) {
    use tower::ServiceExt;
    let response = idmint_node::http::router(node.clone())
        .oneshot(
            axum::http::Request::get(path)
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&body).unwrap())
}

/// Exhaustion foresight: a snowflake namespace's detail shows its worker pool
/// (two nodes on one authority hold 2 of the twitter layout's 1024 worker ids; 1 once one
/// released), its sequence headroom (exact peaks: 10 ids in one unit; a burst of 10,000 runs
/// units full, 4096 of 4096, and waits), and the time left until the layout's timestamp bits
/// run out, exactly, on the injected clock. Reading it changes nothing in the authority.
#[tokio::test(start_paused = true)]
async fn a_snowflake_detail_shows_pool_headroom_and_time_left() {
    let clock = TestClock::new();
    let memory = Arc::new(MemoryAuthority::with_clock(clock.clone()));
    let authority: Arc<dyn Authority> = memory.clone();
    let a = start(WorkerConfig::Lease, authority.clone(), &clock)
        .await
        .unwrap();
    let b = start(WorkerConfig::Lease, authority.clone(), &clock)
        .await
        .unwrap();

    // Twitter: 41 bits of ms since 1288834974657 ms end at 1288834974657 + 2^41 ms.
    let end_ms: u64 = 1_288_834_974_657 + (1 << 41);
    let at = std::time::UNIX_EPOCH + Duration::from_millis(START_WALL_MS);
    let info = serde_json::to_value(events(&a).await.info(at)).unwrap();
    assert_eq!(info["state"]["time_runs_out"], "2080-07-10T17:30:30.209Z");
    assert_eq!(
        info["state"]["seconds_to_exhaustion"],
        (end_ms - START_WALL_MS) / 1000
    );
    assert_eq!(info["state"]["seconds_to_exhaustion"], 1_707_858_230u64);
    // `info` alone reads no authority: the pool is only in the live detail.
    assert_eq!(info["state"]["worker_pool"], serde_json::Value::Null);

    let group_before = memory
        .group(&NamespaceName::new("events").unwrap())
        .await
        .unwrap();
    let now = b.now();
    let (status, detail) = get_json(&b, "/v1/namespaces/events").await;
    assert_eq!(status, 200, "{detail}");
    let state = &detail["state"];
    let now_ns = now
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    assert_eq!(
        state["seconds_to_exhaustion"],
        (end_ms * 1_000_000 - now_ns) / 1_000_000_000,
        "{detail}"
    );
    assert_eq!(
        state["worker_pool"],
        serde_json::json!({"group": "events", "possible": 1024, "held": 2,
                           "used_fraction": 2.0 / 1024.0, "error": null}),
        "{detail}"
    );
    assert_eq!(
        state["sequence_headroom"],
        serde_json::json!({"limit_per_unit": 4096, "limit_per_second": 4_096_000.0,
                           "peak_per_unit": 0, "peak_fraction": 0.0, "headroom_per_unit": 4096,
                           "units_exhausted": 0, "window_seconds": 60}),
        "{detail}"
    );
    assert_eq!(
        memory
            .group(&NamespaceName::new("events").unwrap())
            .await
            .unwrap(),
        group_before,
        "reading the detail changed the leases"
    );

    // Ten ids in one unit on b; a burst of 10,000 on a runs whole units full and waits.
    take(&*events(&b).await, 10).await.unwrap();
    let burst = take(&*events(&a).await, 10_000).await.unwrap();
    assert_eq!(burst.len(), 10_000);
    let mut per_unit = std::collections::BTreeMap::new();
    for id in &burst {
        *per_unit.entry(unix_ms_of(*id)).or_insert(0u64) += 1;
    }
    assert_eq!(per_unit.values().max(), Some(&4096), "{per_unit:?}");
    let (_, detail) = get_json(&b, "/v1/namespaces/events").await;
    let h = &detail["state"]["sequence_headroom"];
    assert_eq!(h["peak_per_unit"], 10, "{detail}");
    assert_eq!(h["peak_fraction"], 10.0 / 4096.0, "{detail}");
    assert_eq!(h["headroom_per_unit"], 4086, "{detail}");
    let (_, detail) = get_json(&a, "/v1/namespaces/events").await;
    let h = &detail["state"]["sequence_headroom"];
    assert_eq!(h["peak_per_unit"], 4096, "{detail}");
    assert_eq!(h["peak_fraction"], 1.0, "{detail}");
    assert_eq!(h["headroom_per_unit"], 0, "{detail}");
    let full_units = per_unit.values().filter(|&&n| n == 4096).count() as u64;
    assert!(
        h["units_exhausted"].as_u64().unwrap() >= full_units,
        "every full unit made the burst wait: {detail} {per_unit:?}"
    );
    assert_eq!(detail["state"]["worker_pool"]["held"], 2, "{detail}");

    // The listing carries the same; after a's lease is released, b sees 1 of 1024.
    a.shutdown().await;
    let (_, list) = get_json(&b, "/v1/namespaces").await;
    let listed = &list["namespaces"][0]["state"]["worker_pool"];
    assert_eq!(listed["held"], 1, "{list}");
    assert_eq!(listed["used_fraction"], 1.0 / 1024.0, "{list}");

    // Two minutes on, the burst is forgotten.
    tokio::time::sleep(Duration::from_secs(121)).await;
    let (_, detail) = get_json(&b, "/v1/namespaces/events").await;
    assert_eq!(
        detail["state"]["sequence_headroom"]["peak_per_unit"], 0,
        "{detail}"
    );
    b.shutdown().await;
}

/// The worker pool of a node whose authority cannot answer its read is reported as unknown,
/// with the reason, and the detail still answers 200.
#[tokio::test(start_paused = true)]
async fn an_unreadable_pool_is_unknown_with_the_reason() {
    let clock = TestClock::new();
    let flaky = Arc::new(FlakyLeases {
        inner: Arc::new(MemoryAuthority::with_clock(clock.clone())),
        down: AtomicBool::new(false),
    });
    let node = start(WorkerConfig::Lease, flaky.clone(), &clock)
        .await
        .unwrap();
    flaky.down.store(true, Ordering::SeqCst);
    let (status, detail) = get_json(&node, "/v1/namespaces/events").await;
    assert_eq!(status, 200, "{detail}");
    let pool = &detail["state"]["worker_pool"];
    assert_eq!(pool["held"], serde_json::Value::Null, "{detail}");
    assert_eq!(pool["possible"], 1024, "{detail}");
    assert!(
        pool["error"]
            .as_str()
            .unwrap()
            .contains("switched off by the test"),
        "{detail}"
    );
    flaky.down.store(false, Ordering::SeqCst);
    node.shutdown().await;
}
