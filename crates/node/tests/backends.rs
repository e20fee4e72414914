//! Nodes served in process (`idmint_node::run` on `127.0.0.1:0`) over each real backend,
//! PostgreSQL, MySQL/MariaDB (block mode) and etcd, reached through a [`FaultProxy`]: what a
//! node does when its authority is cut off, loses a reply, or is slow. Each scenario is written
//! once and run against every backend; a last test serves Flickr's ticket mode without a cache.
//!
//! What is checked (docs/design.md invariants 1, 2, 3, 5):
//! - an outage is bridged by the buffer: every request succeeds while buffered ids last (at
//!   least as many as `ids_buffered` said at the cut), then 503 `authority_unavailable` naming
//!   the backend, then recovery by itself; ids unique and strictly increasing throughout;
//! - a refill whose reply is lost (the commit happened, the node never learns it) fails, the
//!   next one succeeds, and the lost block is never served: ids continue above it, as the
//!   authority's durable watermark (read through a separate, direct authority) confirms;
//! - a give-back at a clean stop whose reply is lost (the backend applied it) burns the tail:
//!   another node is granted it, and the node restarted on its data directory serves none of
//!   it;
//! - a slow backend (100 ms per chunk each way) does not slow requests served from the buffer
//!   (p99 of single-id requests printed for a fast and a slow backend; no timing is asserted);
//! - ticket mode without a cache: every request's id is one `REPLACE INTO`, dense, increasing,
//!   of the server's residue class.
//!
//! Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust), MariaDB on 127.0.0.1:3306 (root
//! without password) and the `etcd` binary; every test has its own database or private etcd.
//! No test sleeps to order events: every wait polls a condition against a deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use idmint_core::{BufferConfig, BufferPolicy, NamespaceName, SequenceSpec, Sizing, Width};
use idmint_node::{Authority, CacheMode, KindConfig, NodeConfig};
use idmint_store::etcd::{EtcdAuthority, EtcdConfig};
use idmint_store::mysql::{ticket_table_name, MysqlAuthority, MysqlConfig, MysqlTicketAuthority};
use idmint_store::postgres::{PostgresAuthority, PostgresConfig};
use idmint_testkit::etcd::PrivateEtcd;
use idmint_testkit::proxy::{Fault, FaultProxy};
use idmint_testkit::{mysql as my, postgres as pg};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{poll_until, TestNode, DEADLINE};

/// The node's authority gives up on an operation after this long (through the proxy).
const OP_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a request waits for a refill before answering 503.
const REFILL_WAIT: Duration = Duration::from_secs(1);
/// How often the refill task checks the buffer.
const REFILL_TICK: Duration = Duration::from_millis(20);
/// Every refill asks for this many ids.
const BLOCK: u64 = 2000;
/// The namespace the scenarios use.
const NS: &str = "orders";

// ---------------------------------------------------------------------------------------------
// Backends

#[derive(Debug, Clone, Copy)]
enum Backend {
    Postgres,
    Mysql,
    Etcd,
}

/// What keeps a backend's data alive for the test: dropped (database dropped, etcd killed) at
/// the end (the MySQL and etcd ones are only held).
#[allow(dead_code)]
enum Server {
    Postgres(pg::TempDatabase),
    Mysql(my::TempDatabase),
    Etcd(PrivateEtcd),
}

/// A backend of the test's own, a proxy in front of it, and two authorities on it.
struct Backing {
    /// The backend's `Authority::kind`, which error messages must name.
    kind: &'static str,
    proxy: FaultProxy,
    /// The node's authority: through the proxy, with a short operation timeout.
    via_proxy: Arc<dyn Authority>,
    /// Straight to the server: reads the durable state whatever the proxy does.
    direct: Arc<dyn Authority>,
    server: Server,
}

fn fail_connect(what: &str, e: impl std::fmt::Display) -> ! {
    panic!("connecting the {what} authority failed: {e}")
}

async fn postgres(url: String, op_timeout: Duration) -> Arc<dyn Authority> {
    let mut config = PostgresConfig::new(url);
    config.op_timeout = op_timeout;
    match PostgresAuthority::connect(config).await {
        Ok(a) => Arc::new(a),
        Err(e) => fail_connect("PostgreSQL", e),
    }
}

fn mysql_config(url: String, op_timeout: Duration) -> MysqlConfig {
    let mut config = MysqlConfig::new(url);
    config.op_timeout = op_timeout;
    config
}

async fn mysql(url: String, op_timeout: Duration) -> Arc<dyn Authority> {
    match MysqlAuthority::connect(mysql_config(url, op_timeout)).await {
        Ok(a) => Arc::new(a),
        Err(e) => fail_connect("MySQL", e),
    }
}

async fn etcd(url: String, op_timeout: Duration) -> Arc<dyn Authority> {
    let mut config = EtcdConfig::new([url]);
    config.op_timeout = op_timeout;
    match EtcdAuthority::connect(config).await {
        Ok(a) => Arc::new(a),
        Err(e) => fail_connect("etcd", e),
    }
}

/// A fresh database (or private etcd) for `backend`, a proxy in front of it and the two
/// authorities.
async fn backing(backend: Backend) -> Backing {
    let direct_timeout = Duration::from_secs(5);
    match backend {
        Backend::Postgres => {
            let db = pg::TempDatabase::create().await;
            let proxy = FaultProxy::start(db.server_addr()).await.unwrap();
            Backing {
                kind: "postgres",
                via_proxy: postgres(db.url_via(proxy.addr()), OP_TIMEOUT).await,
                direct: postgres(db.url(), direct_timeout).await,
                proxy,
                server: Server::Postgres(db),
            }
        }
        Backend::Mysql => {
            // The test kit runs the command-line client (blocking).
            let db = tokio::task::block_in_place(my::TempDatabase::new);
            let proxy = FaultProxy::start(db.socket_addr()).await.unwrap();
            Backing {
                kind: "mysql",
                via_proxy: mysql(db.url_via_addr(proxy.addr()), OP_TIMEOUT).await,
                direct: mysql(db.url(), direct_timeout).await,
                proxy,
                server: Server::Mysql(db),
            }
        }
        Backend::Etcd => {
            let server = PrivateEtcd::start().await;
            let proxy = FaultProxy::start(server.client_addr()).await.unwrap();
            Backing {
                kind: "etcd",
                via_proxy: etcd(format!("http://{}", proxy.addr()), OP_TIMEOUT).await,
                direct: etcd(server.client_url(), direct_timeout).await,
                proxy,
                server: Server::Etcd(server),
            }
        }
    }
}

impl Backing {
    /// The namespace's durable watermark, read straight from the server.
    async fn durable_watermark(&self) -> u64 {
        self.direct
            .state(&ns_name())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("the {} authority has no namespace {NS}", self.kind))
            .watermark
    }
}

fn ns_name() -> NamespaceName {
    NamespaceName::new(NS).unwrap()
}

/// One 64-bit sequence namespace [`NS`] from 1, fixed blocks of `block` ids refilled below
/// `low_water` of a block; small refill tick, 1 s refill wait.
fn node_config(block: u64, low_water: f64) -> NodeConfig {
    let policy = BufferPolicy::new(BufferConfig {
        sizing: Sizing::Fixed(block),
        low_water,
        demand_window: Duration::from_secs(5),
    })
    .unwrap();
    let namespaces = BTreeMap::from([(
        ns_name(),
        KindConfig::Sequence {
            spec: SequenceSpec::default_64(),
            cache: CacheMode::Buffered(policy),
            order: Default::default(),
        },
    )]);
    NodeConfig {
        auto_create: false,
        refill_tick: REFILL_TICK,
        refill_wait: REFILL_WAIT,
        namespaces,
        ..NodeConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// An in-process node

/// Ids, namespace state and metrics over HTTP, on top of the shared harness.
impl TestNode {
    /// `GET /v1/ids/{ns}?count=N`: status and body.
    async fn try_ids(&self, ns: &str, count: u64) -> (u16, Value) {
        self.get(&format!("/v1/ids/{ns}?count={count}")).await
    }

    /// `count` ids of `ns`, asserting 200.
    async fn ids(&self, ns: &str, count: u64) -> Vec<u64> {
        let got = self.try_ids(ns, count).await;
        assert_eq!(got.0, 200, "GET /v1/ids/{ns}?count={count}: {}", got.1);
        ids_of(&got.1, ns, count)
    }

    /// `GET /v1/namespaces/{NS}`'s `state`.
    async fn state(&self) -> Value {
        let (status, body) = self.get(&format!("/v1/namespaces/{NS}")).await;
        assert_eq!(status, 200, "{body}");
        body["state"].clone()
    }

    async fn ids_buffered(&self) -> u64 {
        let state = self.state().await;
        state["ids_buffered"]
            .as_u64()
            .unwrap_or_else(|| panic!("no ids_buffered: {state}"))
    }

    /// A sample of `/metrics`: the value of the line starting with `series` (name and
    /// labels, e.g. `idmint_refills_total{namespace="orders",outcome="ok"}`), 0 if absent.
    async fn metric(&self, series: &str) -> f64 {
        let (status, text) = self.text("/metrics").await;
        assert_eq!(status, 200, "{text}");
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0.0)
    }

    async fn refills(&self, outcome: &str) -> u64 {
        self.metric(&format!(
            "idmint_refills_total{{namespace=\"{NS}\",outcome=\"{outcome}\"}}"
        ))
        .await as u64
    }
}

/// The ids of a `/v1/ids` response, checking the namespace and the count.
fn ids_of(body: &Value, ns: &str, count: u64) -> Vec<u64> {
    assert_eq!(body["namespace"], ns, "{body}");
    let ids: Vec<u64> = body["ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no ids array: {body}"))
        .iter()
        .map(|v| {
            let s = v
                .as_str()
                .unwrap_or_else(|| panic!("ids must be strings: {body}"));
            s.parse()
                .unwrap_or_else(|e| panic!("not a decimal id ({e}): {s:?}"))
        })
        .collect();
    assert_eq!(ids.len() as u64, count, "count not honoured: {body}");
    ids
}

#[track_caller]
fn assert_strictly_increasing(what: &str, ids: &[u64]) {
    for pair in ids.windows(2) {
        assert!(pair[0] < pair[1], "{what}: ids not increasing: {pair:?}");
    }
}

/// Asserts a 503 `authority_unavailable` whose message names the backend.
#[track_caller]
fn assert_unavailable_naming(got: &(u16, Value), kind: &str) {
    let (status, body) = got;
    assert_eq!(*status, 503, "{body}");
    assert_eq!(body["error"]["code"], "authority_unavailable", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(kind),
        "the message must name the {kind} backend: {body}"
    );
}

// ---------------------------------------------------------------------------------------------
// Scenario 1: the backend is cut off

/// The backend is cut off: buffered ids keep flowing (every request succeeds while they last),
/// then 503 `authority_unavailable` naming the backend, while refills keep failing; once the
/// cut is lifted the node recovers by itself. Ids unique and strictly increasing throughout.
///
/// Guards against a request that waits out `refill_wait` while the refill task backs off after
/// failures (up to 2 s) answering "no block arrived within 1s", naming neither the backend nor
/// its error (`SequenceNamespace::fill`).
async fn outage_is_bridged_then_503_then_recovery(backend: Backend) {
    let b = backing(backend).await;
    let node = TestNode::start(node_config(BLOCK, 0.5), b.via_proxy.clone()).await;
    // The first request waits for the first block; then the buffer holds the rest of it and,
    // being above the low-water mark, no refill is in flight.
    let mut served = node.ids(NS, 1).await;
    let n = &node;
    poll_until("the first block is buffered", move || async move {
        n.ids_buffered().await == BLOCK - 1
    })
    .await;
    let errors_before = node.refills("error").await;

    b.proxy.set_fault(Fault::Cut);
    // Nothing is served between the cut and this read; a refill can only add ids.
    let buffered = node.ids_buffered().await;
    let cut_at = Instant::now();
    let mut served_in_outage = 0u64;
    let failure = loop {
        let got = node.try_ids(NS, 1).await;
        if got.0 != 200 {
            break got;
        }
        served.extend(ids_of(&got.1, NS, 1));
        served_in_outage += 1;
        assert!(
            served_in_outage <= 10 * BLOCK,
            "the outage is never noticed"
        );
    };
    println!(
        "{}: {served_in_outage} requests served from the buffer ({buffered} buffered at the cut) \
         in {:?}, then: {}",
        b.kind,
        cut_at.elapsed(),
        failure.1
    );
    assert!(
        served_in_outage >= buffered,
        "{}: a request failed with {buffered} ids buffered, after only {served_in_outage}",
        b.kind
    );
    assert_unavailable_naming(&failure, b.kind);

    // The cut lasts several refill periods: refills keep failing, requests keep answering 503
    // (never a stale or repeated id).
    let n = &node;
    poll_until(
        "three more refills failed during the cut",
        move || async move { n.refills("error").await >= errors_before + 3 },
    )
    .await;
    assert_unavailable_naming(&node.try_ids(NS, 3).await, b.kind);
    assert_unavailable_naming(&node.get("/readyz").await, b.kind);
    let last_error = node.state().await["last_error"].clone();
    assert!(
        last_error.as_str().is_some_and(|e| e.contains(b.kind)),
        "last_error must name the {} backend: {last_error}",
        b.kind
    );

    b.proxy.set_fault(Fault::None);
    let lifted = Instant::now();
    // The refill task retries with a backoff of at most 2 s: poll until a request succeeds.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let got = node.try_ids(NS, 5).await;
        if got.0 == 200 {
            served.extend(ids_of(&got.1, NS, 5));
            break;
        }
        assert_eq!(got.1["error"]["code"], "authority_unavailable", "{}", got.1);
        assert!(
            Instant::now() < deadline,
            "{}: the node did not recover",
            b.kind
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "{}: recovered {:?} after the cut was lifted",
        b.kind,
        lifted.elapsed()
    );
    served.extend(node.ids(NS, 300).await);
    assert_strictly_increasing(b.kind, &served);
    let ready = node.get("/readyz").await;
    assert_eq!(ready.0, 200, "{}", ready.1);
    assert_eq!(ready.1["authority"], b.kind);

    // Invariant 1: everything served lies below the durable watermark, also after the
    // shutdown's hand-back (invariant 2's compare-and-swap lowers it to the first unserved id
    // at most).
    let last = *served.last().unwrap();
    assert!(b.durable_watermark().await > last);
    node.stop().await;
    assert!(b.durable_watermark().await > last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_is_bridged_then_503_then_recovery() {
    outage_is_bridged_then_503_then_recovery(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_outage_is_bridged_then_503_then_recovery() {
    outage_is_bridged_then_503_then_recovery(Backend::Mysql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_outage_is_bridged_then_503_then_recovery() {
    outage_is_bridged_then_503_then_recovery(Backend::Etcd).await;
}

// ---------------------------------------------------------------------------------------------
// Scenario 2: an ambiguous commit

/// The reply to a refill is lost after the backend committed it: the refill fails, the next
/// succeeds, and the lost block is burned: no id is served twice and the ids after the fault
/// lie above the lost block, whose commit the durable watermark shows.
async fn lost_refill_reply_burns_the_block(backend: Backend) {
    let b = backing(backend).await;
    let node = TestNode::start(node_config(BLOCK, 0.5), b.via_proxy.clone()).await;
    let n = &node;
    poll_until("the first block is buffered", move || async move {
        n.ids_buffered().await == BLOCK
    })
    .await;
    // The node holds exactly [1, 1 + BLOCK); nothing else is reserved.
    let w0 = b.durable_watermark().await;
    assert_eq!(w0, 1 + BLOCK);
    let (ok_before, errors_before) = (node.refills("ok").await, node.refills("error").await);

    // The node is idle above its low-water mark: the next reply from the backend is the one to
    // the refill the next request triggers.
    b.proxy.set_fault(Fault::DropNextReply);
    let half = BLOCK / 2 + 1;
    let mut served = node.ids(NS, half).await;
    assert_eq!(served, (1..=half).collect::<Vec<u64>>());
    let n = &node;
    let proxy = &b.proxy;
    // Waits on the namespace's state, which reads nothing from the backend: `/metrics` pings
    // the authority (its readiness), and a ping's reply would be the one the proxy drops.
    // The lost block is never buffered; the next refill's block is.
    let refilled = BLOCK - half + BLOCK;
    let waited = tokio::time::timeout(
        support::DEADLINE - std::time::Duration::from_secs(2),
        poll_until(
            "the block after the lost one is buffered",
            move || async move { n.ids_buffered().await >= refilled },
        ),
    )
    .await;
    // Say which case it was when it did not happen: whether the proxy dropped a reply at all,
    // and what the refills did since the fault was armed.
    assert!(
        waited.is_ok(),
        "{}: no block buffered after the lost one; proxy fault now {:?}; refills since: {} \
         failed, {} succeeded; buffered {}",
        b.kind,
        proxy.fault(),
        node.refills("error").await - errors_before,
        node.refills("ok").await - ok_before,
        node.ids_buffered().await
    );
    assert!(
        node.refills("error").await > errors_before,
        "{}: the refill whose reply was dropped did not fail",
        b.kind
    );
    assert_eq!(b.proxy.fault(), Fault::None, "the reply was dropped");
    println!(
        "{}: refills after the lost reply: {} failed, {} succeeded",
        b.kind,
        node.refills("error").await - errors_before,
        node.refills("ok").await - ok_before
    );

    // The rest of the first block, then ids of the new block.
    served.extend(node.ids(NS, BLOCK - half).await);
    let after = node.ids(NS, 10).await;
    let lost_end = w0 + BLOCK;
    assert!(
        after[0] >= lost_end,
        "{}: id {} served after the lost refill lies in the lost block [{w0}, {lost_end})",
        b.kind,
        after[0]
    );
    served.extend(&after);
    assert_strictly_increasing(b.kind, &served);
    let unique: HashSet<u64> = served.iter().copied().collect();
    assert_eq!(unique.len(), served.len());
    // The lost refill committed (its block is below the durable watermark), and so did the
    // one that followed it.
    let w = b.durable_watermark().await;
    assert!(
        w >= lost_end + BLOCK && w > *after.last().unwrap(),
        "{}: durable watermark {w}: the lost block [{w0}, {lost_end}) and the next one must be \
         below it",
        b.kind
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lost_refill_reply_burns_the_block() {
    lost_refill_reply_burns_the_block(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_lost_refill_reply_burns_the_block() {
    lost_refill_reply_burns_the_block(Backend::Mysql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_lost_refill_reply_burns_the_block() {
    lost_refill_reply_burns_the_block(Backend::Etcd).await;
}

/// The give-back of a clean stop is applied by the backend but its reply is lost: the node
/// burns the tail, never keeps it (the outcome is unknown), so once another node was granted
/// those ids, the node restarted on its data directory serves none of them.
async fn lost_give_back_reply_burns_the_tail(backend: Backend) {
    let b = backing(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = node_config(BLOCK, 0.5);
    config.keep_blocks = Some(idmint_node::KeepBlocks {
        dir: dir.path().to_owned(),
        authority: format!("{} (test)", b.kind),
    });
    let node = TestNode::start(config.clone(), b.via_proxy.clone()).await;
    let n = &node;
    poll_until("the first block is buffered", move || async move {
        n.ids_buffered().await == BLOCK
    })
    .await;
    let mut served = node.ids(NS, 10).await;
    assert_eq!(served, (1..=10).collect::<Vec<u64>>());
    let report = match &b.server {
        // As an operator's session would: the namespace's row locked past the node's timeout,
        // so the give-back's UPDATE waits, the node gives up, and the UPDATE commits once the
        // lock goes. (Through the proxy, the reply dropped would be the give-back's read,
        // which is retried.)
        Server::Postgres(db) => {
            let session = db.client().await;
            session
                .batch_execute(&format!(
                    "BEGIN; SELECT 1 FROM idmint_namespaces WHERE name = '{NS}' FOR UPDATE"
                ))
                .await
                .unwrap();
            let report = node.stop().await;
            session.batch_execute("COMMIT").await.unwrap();
            report
        }
        _ => {
            b.proxy.set_fault(Fault::DropNextReply);
            let report = node.stop().await;
            assert_eq!(
                b.proxy.fault(),
                Fault::None,
                "{}: no reply was dropped",
                b.kind
            );
            report
        }
    };
    assert_eq!(
        (report.given_back, report.kept, report.burned),
        (0, 0, BLOCK - 10),
        "{}: the tail whose give-back has no answer is burned",
        b.kind
    );
    let backing = &b;
    poll_until("the backend applies the give-back", move || async move {
        backing.durable_watermark().await == 11
    })
    .await;
    let other = TestNode::start(node_config(BLOCK, 0.5), b.direct.clone()).await;
    let granted = other.ids(NS, 100).await;
    assert_eq!(granted[0], 11, "{}: the tail was granted again", b.kind);
    served.extend(granted);
    let node = TestNode::start(config, b.via_proxy.clone()).await;
    served.extend(node.ids(NS, 100).await);
    let unique: HashSet<u64> = served.iter().copied().collect();
    assert_eq!(unique.len(), served.len(), "{}: an id served twice", b.kind);
    node.stop().await;
    other.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lost_give_back_reply_burns_the_tail() {
    lost_give_back_reply_burns_the_tail(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_lost_give_back_reply_burns_the_tail() {
    lost_give_back_reply_burns_the_tail(Backend::Mysql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_lost_give_back_reply_burns_the_tail() {
    lost_give_back_reply_burns_the_tail(Backend::Etcd).await;
}

// ---------------------------------------------------------------------------------------------
// Scenario 3: a slow backend

/// `requests` sequential single-id requests: the latency of each, and the ids.
async fn single_id_requests(node: &TestNode, requests: usize) -> (Vec<Duration>, Vec<u64>) {
    let mut latencies = Vec::with_capacity(requests);
    let mut ids = Vec::with_capacity(requests);
    for _ in 0..requests {
        let started = Instant::now();
        let got = node.ids(NS, 1).await;
        latencies.push(started.elapsed());
        ids.extend(got);
    }
    (latencies, ids)
}

fn percentile(latencies: &[Duration], p: f64) -> Duration {
    let mut sorted = latencies.to_vec();
    sorted.sort_unstable();
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The mean refill round trip since `(sum, count)` of the refill histogram, and the new pair.
async fn refill_mean(node: &TestNode, since: (f64, f64)) -> (Duration, (f64, f64)) {
    let sum = node
        .metric(&format!(
            "idmint_refill_duration_seconds_sum{{namespace=\"{NS}\"}}"
        ))
        .await;
    let count = node
        .metric(&format!(
            "idmint_refill_duration_seconds_count{{namespace=\"{NS}\"}}"
        ))
        .await;
    let n = (count - since.1).max(1.0);
    (
        Duration::from_secs_f64((sum - since.0).max(0.0) / n),
        (sum, count),
    )
}

/// With 100 ms of latency per chunk each way between node and backend, single ids keep coming
/// from the buffer: refills run in the background while requests are answered. Prints the p99
/// of 2000 sequential requests against the fast and the slow backend; asserts zero failures
/// and that a refill ran during the slow run.
async fn slow_backend_does_not_slow_buffered_requests(backend: Backend) {
    const REQUESTS: usize = 2000;
    let b = backing(backend).await;
    // Refill below 3/4 of a block: 1500 ids of headroom while a slow refill is in flight.
    let node = TestNode::start(node_config(BLOCK, 0.75), b.via_proxy.clone()).await;
    let mut served = node.ids(NS, 1).await;
    let (_, mark) = refill_mean(&node, (0.0, 0.0)).await;

    let (fast, ids) = single_id_requests(&node, REQUESTS).await;
    served.extend(ids);
    let n = &node;
    // At or above the low-water mark no refill is in flight (one starts only below it, and
    // lands with a whole block).
    poll_until("no refill in flight", move || async move {
        n.ids_buffered().await >= BLOCK * 3 / 4
    })
    .await;
    let (fast_refill, mark) = refill_mean(&node, mark).await;

    b.proxy.set_latency(Duration::from_millis(100));
    let ok_before = node.refills("ok").await;
    let (slow, ids) = single_id_requests(&node, REQUESTS).await;
    served.extend(ids);
    // The buffer went below its low-water mark during the slow run: a refill ran (it may land
    // after the last request).
    let n = &node;
    poll_until("the refill of the slow run landed", move || async move {
        n.refills("ok").await > ok_before
    })
    .await;
    let (slow_refill, _) = refill_mean(&node, mark).await;
    b.proxy.set_latency(Duration::ZERO);

    println!(
        "{}: p99 of {REQUESTS} single-id requests: fast backend {:?} (p50 {:?}, max {:?}, \
         refill {:?}), slow backend {:?} (p50 {:?}, max {:?}, refill {:?})",
        b.kind,
        percentile(&fast, 0.99),
        percentile(&fast, 0.5),
        percentile(&fast, 1.0),
        fast_refill,
        percentile(&slow, 0.99),
        percentile(&slow, 0.5),
        percentile(&slow, 1.0),
        slow_refill,
    );
    assert_strictly_increasing(b.kind, &served);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_slow_backend_does_not_slow_buffered_requests() {
    slow_backend_does_not_slow_buffered_requests(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_slow_backend_does_not_slow_buffered_requests() {
    slow_backend_does_not_slow_buffered_requests(Backend::Mysql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_slow_backend_does_not_slow_buffered_requests() {
    slow_backend_does_not_slow_buffered_requests(Backend::Etcd).await;
}

// ---------------------------------------------------------------------------------------------
// Flickr's ticket server behind a node without a cache

/// MySQL ticket mode with cache `off`: each request's id is one `REPLACE INTO` on the server,
/// so sequential requests get the server's class densely (`id ≡ offset mod increment`, each one
/// `increment` above the last) and the ticket table's `MAX(id)` is the last id served;
/// concurrent clients get unique ids, increasing for each client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticket_mode_without_cache_serves_each_id_from_the_server() {
    let db = tokio::task::block_in_place(my::TempDatabase::new);
    let tickets = match MysqlTicketAuthority::connect(mysql_config(db.url(), OP_TIMEOUT)).await {
        Ok(a) => Arc::new(a),
        Err(e) => fail_connect("MySQL ticket-mode", e),
    };
    // The system server's settings (most likely increment 1): MySQL's offset n is class
    // n mod increment.
    let (increment, offset) = tickets.server_auto_increment().await.unwrap();
    let class = offset % increment;
    let spec = SequenceSpec::new(Width::Bits64, 1, increment, class).unwrap();
    let ns = NamespaceName::new("tickets64").unwrap();
    let config = NodeConfig {
        auto_create: false,
        namespaces: BTreeMap::from([(
            ns.clone(),
            KindConfig::Sequence {
                spec,
                cache: CacheMode::Off,
                order: Default::default(),
            },
        )]),
        ..NodeConfig::default()
    };
    let node = TestNode::start(config, tickets.clone()).await;
    let table = ticket_table_name(&ns);
    let max_id = |db: &my::TempDatabase| {
        let out = tokio::task::block_in_place(|| db.sql(&format!("SELECT MAX(id) FROM `{table}`")))
            .unwrap();
        out.trim()
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("MAX(id): {out:?}"))
    };

    let mut sequential = Vec::new();
    for i in 0..100 {
        let id = node.ids("tickets64", 1).await[0];
        assert_eq!(id % increment, class, "id {id} outside the server's class");
        if let Some(prev) = sequential.last() {
            assert_eq!(
                id,
                prev + increment,
                "request {i}: not the server's next ticket"
            );
        }
        sequential.push(id);
        if i % 25 == 0 {
            assert_eq!(
                max_id(&db),
                id,
                "the id came from REPLACE INTO, nothing buffered"
            );
        }
    }
    assert_eq!(max_id(&db), *sequential.last().unwrap());

    // Concurrent clients: unique, increasing per client, all of the class.
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (client, base) = (node.client.clone(), node.base.clone());
        clients.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..25 {
                let resp = client
                    .get(format!("{base}/v1/ids/tickets64?count=1"))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status().as_u16(), 200);
                let body: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
                got.extend(ids_of(&body, "tickets64", 1));
            }
            got
        }));
    }
    let mut all: HashSet<u64> = sequential.iter().copied().collect();
    for c in clients {
        let got = c.await.unwrap();
        assert_strictly_increasing("one client", &got);
        for id in got {
            assert_eq!(id % increment, class);
            assert!(id > *sequential.last().unwrap());
            assert!(all.insert(id), "id {id} served twice");
        }
    }
    assert_eq!(all.len(), 200);
    // Concurrent REPLACEs may commit out of the order their ids were allocated in, leaving a
    // lower id in the one ticket row than the highest one handed out (seen in CI: 199 after
    // 200). The server's counter is what matters, and the next ids below come above all.
    assert!(max_id(&db) <= *all.iter().max().unwrap());
    // A request for several ids gets them all, each from its own REPLACE INTO (not one id for
    // `count=3` from a cache-off namespace over a ticket server).
    let three = node.ids("tickets64", 3).await;
    let top = *all.iter().max().unwrap();
    assert_eq!(
        three,
        vec![top + increment, top + 2 * increment, top + 3 * increment]
    );
    assert_eq!(max_id(&db), three[2]);
    // Every id served is counted, cache-off namespaces' too.
    let counted = node
        .metric("idmint_ids_served_total{namespace=\"tickets64\"}")
        .await;
    assert_eq!(counted, 203.0);
    // The node reports what the server issued.
    let (_, info) = node.get("/v1/namespaces/tickets64").await;
    assert_eq!(info["settings"]["cache"]["mode"], "off", "{info}");
    assert_eq!(info["settings"]["step"], increment, "{info}");
    node.stop().await;
    drop(db);
}
