//! End-to-end tests of the HTTP/JSON API (docs/api.md) against nodes served
//! in process by `idmint_node::run` on `127.0.0.1:0`, each with its own authority (memory, or a
//! file store in its own temp dir).
//!
//! What is checked: every endpoint and every error code with its exact status; the uniqueness
//! invariants over HTTP (ids unique and increasing per client under concurrency, blocks disjoint
//! from served ids); buffered ids keep flowing while the authority is down, then 503, then
//! recovery by itself (invariant 1 seen from outside); a 32-bit namespace ends with a clear error
//! and never wraps (invariant 6); a clean shutdown hands back the unused tail by
//! compare-and-swap and a new node continues exactly after the last served id (invariants 2, 3).
//!
//! No test sleeps to order events: every wait polls a condition against a generous deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

// The outage switch: a real memory authority answering `Unavailable` while switched off.
use idmint_core::{Layout, NamespaceName, Ulid, Uuid7};
use idmint_node::{Authority, FileConfig, NodeConfig};
use idmint_store::conformance::SwitchedAuthority as FlakyAuthority;
use idmint_store::{FileAuthority, MemoryAuthority};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::{poll_until, TestNode, DEADLINE};

/// Ids over HTTP, on top of the shared harness.
impl TestNode {
    /// `count` ids of a sequence or snowflake namespace, as numbers (asserting 200 and the
    /// response's shape).
    async fn ids(&self, ns: &str, count: u64) -> Vec<u64> {
        self.id_strings(ns, count)
            .await
            .iter()
            .map(|s| parse_decimal(s))
            .collect()
    }

    /// `count` ids as the strings the API returns.
    async fn id_strings(&self, ns: &str, count: u64) -> Vec<String> {
        let (status, body) = self.get(&format!("/v1/ids/{ns}?count={count}")).await;
        assert_eq!(status, 200, "GET /v1/ids/{ns}?count={count}: {body}");
        ids_of(&body, ns, count)
    }
}

/// The ids of a `/v1/ids` response, checking the namespace and the count.
fn ids_of(body: &Value, ns: &str, count: u64) -> Vec<String> {
    assert_eq!(body["namespace"], ns, "{body}");
    let ids: Vec<String> = body["ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no ids array: {body}"))
        .iter()
        .map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("ids must be strings: {body}"))
                .to_owned()
        })
        .collect();
    assert_eq!(ids.len() as u64, count, "count not honoured: {body}");
    ids
}

/// A decimal id as the API writes it: digits only, no sign, no leading zero.
fn parse_decimal(s: &str) -> u64 {
    assert!(
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0')),
        "not a canonical decimal id: {s:?}"
    );
    s.parse().unwrap()
}

fn assert_strictly_increasing<T: Ord + std::fmt::Debug>(ids: &[T]) {
    for pair in ids.windows(2) {
        assert!(pair[0] < pair[1], "ids not increasing: {pair:?}");
    }
}

/// Asserts an error response: exact status, the code, and a non-empty message.
#[track_caller]
fn assert_error(got: &(u16, Value), status: u16, code: &str) {
    let (got_status, body) = got;
    assert_eq!(*got_status, status, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "error without a message: {body}");
}

/// The node settings of a config file's text.
fn config(toml: &str) -> NodeConfig {
    FileConfig::parse(toml).unwrap().node
}

fn memory() -> Arc<dyn Authority> {
    Arc::new(MemoryAuthority::new())
}

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Asserts a time in ms since 1970 is within a minute of a reading taken around the request.
fn assert_recent(ms: u64, before: u64) {
    assert!(
        ms + 60_000 >= before && ms <= now_ms() + 60_000,
        "timestamp {ms} ms is not near now ({before} ms)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_ids_are_decimal_increasing_unique_and_auto_created() {
    let node = TestNode::start(NodeConfig::default(), memory()).await;

    // No count: one id. A fresh 64-bit namespace starts at 1.
    let (status, body) = node.get("/v1/ids/photos").await;
    assert_eq!(status, 200, "{body}");
    let first = ids_of(&body, "photos", 1);
    assert_eq!(first, ["1"]);

    let mut all = vec![1];
    for count in [1, 7, 100, 1000, 10_000] {
        let ids = node.ids("photos", count).await;
        assert_eq!(ids.len() as u64, count);
        all.extend(ids);
    }
    assert_strictly_increasing(&all);
    let unique: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len());

    // Auto-created on first use: it is now listed, as a 64-bit sequence.
    let (status, body) = node.get("/v1/namespaces/photos").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["kind"], "sequence");
    assert_eq!(body["settings"]["width"], 64);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_offset_and_32_bit_namespaces_keep_their_class_and_range() {
    let node = TestNode::start(
        config(
            r#"
            [server]
            auto_create = false

            [namespaces.odd]
            kind = "sequence"
            step = 2
            offset = 1

            [namespaces.thirds]
            kind = "sequence"
            start = 100
            step = 3
            offset = 2
            cache = "fixed"
            block_size = 10

            [namespaces.tickets]
            kind = "sequence"
            width = 32
            cache = "off"

            [namespaces.small]
            kind = "sequence"
            width = 32
            "#,
        ),
        memory(),
    )
    .await;

    let odd = node.ids("odd", 500).await;
    assert!(odd.iter().all(|id| id % 2 == 1), "{odd:?}");
    assert_eq!(odd[0], 1);
    assert_strictly_increasing(&odd);

    // Blocks of 10 ids are refilled many times over: the class survives block boundaries.
    let mut thirds = Vec::new();
    for _ in 0..20 {
        thirds.extend(node.ids("thirds", 7).await);
    }
    assert!(
        thirds.iter().all(|id| id % 3 == 2 && *id >= 100),
        "{thirds:?}"
    );
    assert_eq!(thirds[0], 101);
    assert_strictly_increasing(&thirds);
    // Dense within the class: one node, nothing lost between requests.
    assert_eq!(thirds.last(), Some(&(101 + 3 * 139)));

    // Flickr ticket semantics (cache off): dense, in 32 bits.
    let mut tickets = Vec::new();
    for _ in 0..5 {
        tickets.extend(node.ids("tickets", 3).await);
    }
    assert_eq!(tickets, (1..=15).collect::<Vec<u64>>());

    let small = node.ids("small", 2000).await;
    assert!(small.iter().all(|id| *id < 1 << 31));
    assert_strictly_increasing(&small);

    let (_, info) = node.get("/v1/namespaces/thirds").await;
    assert_eq!(info["settings"]["step"], 3);
    assert_eq!(info["settings"]["offset"], 2);
    assert_eq!(info["settings"]["start"], "100");
    assert_eq!(info["settings"]["cache"]["mode"], "fixed");
    let (_, info) = node.get("/v1/namespaces/small").await;
    assert_eq!(info["settings"]["width"], 32);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snowflake_ids_carry_the_configured_worker_and_decode() {
    let node = TestNode::start(
        config(
            r#"
            [namespaces.tweets]
            kind = "snowflake"
            layout = "twitter"
            worker = 7

            [namespaces.events]
            kind = "snowflake"
            worker = 5
            layout = { timestamp_bits = 40, node_bits = 3, sequence_bits = 20, time_unit = "1ms", epoch = "2024-01-01T00:00:00Z" }
            "#,
        ),
        memory(),
    )
    .await;
    let before = now_ms();
    let twitter = Layout::twitter();
    let mut tweets = Vec::new();
    for count in [1, 10, 5000, 3] {
        tweets.extend(node.ids("tweets", count).await);
    }
    assert_strictly_increasing(&tweets);
    for id in &tweets {
        let d = twitter.decode(*id).unwrap();
        assert_eq!(d.parts.node, 7, "id {id}");
        assert_recent(d.unix_millis(), before);
    }

    let (_, info) = node.get("/v1/namespaces/events").await;
    let layout = &info["settings"]["layout"];
    assert_eq!(layout["node_bits"], 3, "{info}");
    let events = node.ids("events", 1000).await;
    assert_strictly_increasing(&events);
    let custom = Layout::new(idmint_core::LayoutSpec {
        timestamp_bits: 40,
        node_bits: 3,
        sequence_bits: 20,
        time_unit: Duration::from_millis(1),
        epoch_unix_ms: layout["epoch_unix_ms"].as_u64().unwrap(),
        order: idmint_core::FieldOrder::NodeThenSequence,
        max_bits: 63,
    })
    .unwrap();
    for id in &events {
        assert_eq!(custom.decode(*id).unwrap().parts.node, 5, "id {id}");
    }

    // The node decodes its own ids the same way.
    let id = tweets[tweets.len() / 2];
    let (status, d) = node.get(&format!("/v1/decode/tweets/{id}")).await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(d["kind"], "snowflake");
    assert_eq!(d["worker"], 7);
    assert!(d.get("shard").is_none(), "{d}");
    assert_eq!(d["id"], id.to_string());
    assert_eq!(d["unix_ms"], twitter.decode(id).unwrap().unix_millis());
    assert!(d["timestamp"].as_str().unwrap().ends_with('Z'), "{d}");
    node.stop().await;
}

/// An instagram-layout namespace's node field is its shard wherever it is shown: the decode
/// answer has `shard` (no `worker`), the layout says `node_field: shard`; the leased or fixed
/// worker id fills it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instagram_id_decodes_with_its_shard() {
    let node = TestNode::start(
        config(
            r#"
            [namespaces.photos]
            kind = "snowflake"
            layout = "instagram"
            worker = 5
            "#,
        ),
        memory(),
    )
    .await;
    let id = node.ids("photos", 1).await[0];
    assert_eq!(Layout::instagram().decode(id).unwrap().parts.node, 5);
    let (status, d) = node.get(&format!("/v1/decode/photos/{id}")).await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(
        (d["kind"].as_str(), d["shard"].as_u64()),
        (Some("snowflake"), Some(5)),
        "{d}"
    );
    assert!(d.get("worker").is_none(), "{d}");
    let (_, info) = node.get("/v1/namespaces/photos").await;
    assert_eq!(info["settings"]["layout"]["node_field"], "shard", "{info}");
    assert_eq!(info["settings"]["worker"], 5, "{info}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uuid7_and_ulid_ids_parse_increase_and_decode() {
    let node = TestNode::start(
        config(
            r#"
            [namespaces.sessions]
            kind = "uuid7"
            [namespaces.orders]
            kind = "ulid"
            "#,
        ),
        memory(),
    )
    .await;
    let before = now_ms();

    let mut uuids = Vec::new();
    for count in [1, 500, 2000] {
        for s in node.id_strings("sessions", count).await {
            let u: Uuid7 = s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"));
            assert_eq!(u.to_string(), s, "not canonical");
            assert_recent(u.unix_millis(), before);
            uuids.push(u);
        }
    }
    assert_strictly_increasing(&uuids);

    let mut ulids = Vec::new();
    for count in [1, 500, 2000] {
        for s in node.id_strings("orders", count).await {
            let u: Ulid = s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"));
            assert_eq!(u.to_string(), s, "not canonical");
            assert_recent(u.unix_millis(), before);
            ulids.push(u);
        }
    }
    assert_strictly_increasing(&ulids);

    let u = uuids[0];
    let (status, d) = node.get(&format!("/v1/decode/sessions/{u}")).await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(d["kind"], "uuid7");
    assert_eq!(d["unix_ms"], u.unix_millis());
    let u = ulids[0];
    let (status, d) = node.get(&format!("/v1/decode/orders/{u}")).await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(d["kind"], "ulid");
    assert_eq!(d["unix_ms"], u.unix_millis());
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decode_of_sequence_ids_reports_class_and_issue() {
    let node = TestNode::start(
        config(
            r#"
            [namespaces.odd]
            kind = "sequence"
            step = 2
            offset = 1
            "#,
        ),
        memory(),
    )
    .await;
    let ids = node.ids("odd", 5).await;
    let (status, d) = node.get(&format!("/v1/decode/odd/{}", ids[2])).await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(d["kind"], "sequence");
    assert_eq!(d["in_namespace"], true);
    assert_eq!(d["issued"], true);
    // The residue class is the offset; a single authority names no member.
    assert_eq!(
        (d["step"].as_u64(), d["residue"].as_u64()),
        (Some(2), Some(1))
    );
    assert!(d.get("member").is_none(), "{d}");
    // An even number is not of the class; a far odd one is of the class but not issued.
    let (_, d) = node.get(&format!("/v1/decode/odd/{}", ids[2] + 1)).await;
    assert_eq!(d["in_namespace"], false, "{d}");
    assert_eq!(d["issued"], false, "{d}");
    assert_eq!(d["residue"], 0, "{d}");
    let (_, d) = node.get("/v1/decode/odd/1000000000001").await;
    assert_eq!(d["in_namespace"], true, "{d}");
    assert_eq!(d["issued"], false, "{d}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_has_its_status_and_code() {
    let node = TestNode::start(
        config(
            r#"
            [server]
            max_count = 100
            max_block_request = 1000

            [namespaces.tweets]
            kind = "snowflake"
            worker = 1

            [namespaces.sessions]
            kind = "uuid7"
            "#,
        ),
        memory(),
    )
    .await;
    // Namespace names: letters, digits, '_', '-', '.', ':', starting with a letter or digit.
    let (status, body) = node.get("/v1/ids/counter:orders?count=2").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["namespace"], "counter:orders", "{body}");
    assert_error(&node.get("/v1/ids/:bad").await, 400, "invalid_namespace");
    assert_error(&node.get("/v1/ids/-bad").await, 400, "invalid_namespace");
    assert_error(&node.get("/v1/ids/a%21b").await, 400, "invalid_namespace");
    assert_error(
        &node.get("/v1/namespaces/.x").await,
        400,
        "invalid_namespace",
    );
    let long = "a".repeat(129);
    assert_error(
        &node.get(&format!("/v1/ids/{long}")).await,
        400,
        "invalid_namespace",
    );

    assert_error(&node.get("/v1/ids/x?count=0").await, 400, "invalid_count");
    assert_error(&node.get("/v1/ids/x?count=101").await, 400, "invalid_count");
    assert_error(&node.get("/v1/ids/x?count=abc").await, 400, "invalid_count");
    assert_error(&node.get("/v1/ids/x?count=-1").await, 400, "invalid_count");
    assert_error(&node.get("/v1/ids/x?count=").await, 400, "invalid_count");
    // max_count itself is allowed.
    assert_eq!(node.ids("x", 100).await.len(), 100);
    // Blocks have their own bound, named in the message.
    let refused = node.post("/v1/blocks/x?count=1001").await;
    assert_error(&refused, 400, "invalid_count");
    assert!(
        refused.1["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("server.max_block_request")),
        "{}",
        refused.1
    );
    assert_eq!(node.post("/v1/blocks/x?count=1000").await.0, 200);

    assert_error(&node.get("/v1/ids/x?cnt=1").await, 400, "invalid_request");
    assert_error(
        &node.get("/v1/ids/x?count=1&extra=2").await,
        400,
        "invalid_request",
    );

    assert_error(
        &node.post("/v1/blocks/tweets?count=10").await,
        409,
        "wrong_kind",
    );
    assert_error(&node.post("/v1/blocks/sessions").await, 409, "wrong_kind");

    assert_error(&node.get("/v2/ids/x").await, 404, "not_found");
    assert_error(&node.get("/nowhere").await, 404, "not_found");
    assert_error(&node.get("/v1/ids").await, 404, "not_found");

    assert_error(&node.post("/v1/ids/x").await, 405, "method_not_allowed");
    assert_error(&node.get("/v1/blocks/x").await, 405, "method_not_allowed");

    assert_error(&node.get("/v1/decode/x/abc").await, 400, "invalid_id");
    assert_error(&node.get("/v1/decode/x/-5").await, 400, "invalid_id");
    assert_error(
        &node.get("/v1/decode/x/18446744073709551616").await,
        400,
        "invalid_id",
    );
    assert_error(&node.get("/v1/decode/tweets/abc").await, 400, "invalid_id");
    assert_error(
        &node.get("/v1/decode/sessions/not-a-uuid").await,
        400,
        "invalid_id",
    );
    node.stop().await;

    // With auto_create off, an unknown name is 404 wherever it appears.
    let node = TestNode::start(
        config("[server]\nauto_create = false\n[namespaces.known]\nkind = \"sequence\"\n"),
        memory(),
    )
    .await;
    assert_error(&node.get("/v1/ids/unknown").await, 404, "unknown_namespace");
    assert_error(
        &node.post("/v1/blocks/unknown").await,
        404,
        "unknown_namespace",
    );
    assert_error(
        &node.get("/v1/decode/unknown/1").await,
        404,
        "unknown_namespace",
    );
    assert_error(
        &node.get("/v1/namespaces/unknown").await,
        404,
        "unknown_namespace",
    );
    assert_eq!(node.ids("known", 2).await, [1, 2]);
    // Errors are counted in the metrics by code.
    let text = node.request(reqwest::Method::GET, "/metrics").await.1;
    assert!(
        text.contains("code=\"unknown_namespace\""),
        "errors are not counted: {text}"
    );
    node.stop().await;
}

/// Invariant 6: a 32-bit namespace that runs out answers `namespace_exhausted`, naming the
/// width, after handing out exactly the ids up to 2^31 - 1; it never wraps, and it keeps giving
/// the same clear answer (not a timeout, not `authority_unavailable`) on every later request.
///
/// Guards against requests after the first `namespace_exhausted` waiting for the refill task,
/// whose retry backoff grows to 2 s, and answering 503 `authority_unavailable` once the
/// backoff outgrows `refill_wait` (`SequenceNamespace::fill` answers from the latest outcome).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_32_bit_namespace_hands_out_the_rest_then_says_so() {
    let mut cfg = config(
        r#"
        [namespaces.small]
        kind = "sequence"
        width = 32
        start = 2147483000
        cache = "fixed"
        block_size = 100
        "#,
    );
    // Short, so that a request that waits for a refill instead of answering shows as a 503.
    cfg.refill_wait = Duration::from_millis(500);
    let node = TestNode::start(cfg, memory()).await;
    let mut ids = Vec::new();
    let exhausted = loop {
        let got = node.get("/v1/ids/small?count=50").await;
        match got.0 {
            200 => {
                let batch = got.1["ids"].as_array().unwrap();
                assert!(!batch.is_empty() && batch.len() <= 50, "{}", got.1);
                ids.extend(batch.iter().map(|v| parse_decimal(v.as_str().unwrap())));
            }
            _ => break got,
        }
        assert!(ids.len() < 10_000, "the namespace does not end");
    };
    assert_eq!(ids, (2_147_483_000..=2_147_483_647).collect::<Vec<u64>>());
    assert_error(&exhausted, 409, "namespace_exhausted");
    let message = exhausted.1["error"]["message"].as_str().unwrap();
    assert!(message.contains("32-bit"), "{message}");

    // Every later request gets the same answer, promptly.
    for attempt in 0..8 {
        let started = std::time::Instant::now();
        let got = node.get("/v1/ids/small").await;
        assert_error(&got, 409, "namespace_exhausted");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "attempt {attempt} took {:?}",
            started.elapsed()
        );
    }
    assert_error(
        &node.post("/v1/blocks/small?count=5").await,
        409,
        "namespace_exhausted",
    );
    let (_, info) = node.get("/v1/namespaces/small").await;
    assert_eq!(info["state"]["used_fraction"], 1.0, "{info}");
    node.stop().await;
}

/// Buffered ids outlive an authority outage: every request succeeds while they last (zero
/// failures), then 503 `authority_unavailable`; when the authority is back the node recovers
/// by itself, and no id is ever repeated across the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authority_outage_is_bridged_by_the_buffer_then_503_then_recovery() {
    let authority = Arc::new(FlakyAuthority::default());
    let mut cfg = config(
        r#"
        [server]
        auto_create = false
        [namespaces.orders]
        kind = "sequence"
        cache = "fixed"
        block_size = 200
        "#,
    );
    cfg.refill_wait = Duration::from_millis(500);
    let node = TestNode::start(cfg, authority.clone()).await;
    let mut served = node.ids("orders", 1).await;

    // Let the buffer fill, then cut the authority off. A refill already in flight may still
    // land: `buffered` is a lower bound of what the outage can be bridged with.
    let n = &node;
    poll_until("the buffer holds a block", move || async move {
        let (_, info) = n.get("/v1/namespaces/orders").await;
        info["state"]["ids_buffered"].as_u64().unwrap() >= 100
    })
    .await;
    authority.set_down(true);
    let (_, info) = node.get("/v1/namespaces/orders").await;
    let buffered = info["state"]["ids_buffered"].as_u64().unwrap();
    assert!(buffered >= 100, "{info}");

    // The buffer bridges the outage: still ready (a load balancer keeps the node), degraded.
    let (status, ready) = node.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["status"], "degraded", "{ready}");
    assert_eq!(ready["authority_up"], false, "{ready}");
    assert!(ready["authority_error"].is_string(), "{ready}");

    let mut served_in_outage = 0u64;
    let failure = loop {
        let got = node.get("/v1/ids/orders").await;
        if got.0 != 200 {
            break got;
        }
        served.extend(ids_of(&got.1, "orders", 1).iter().map(|s| parse_decimal(s)));
        served_in_outage += 1;
        assert!(served_in_outage <= 10_000, "the outage is never noticed");
    };
    assert!(
        served_in_outage >= buffered,
        "a request failed with {buffered} ids buffered, after only {served_in_outage}"
    );
    assert_error(&failure, 503, "authority_unavailable");
    // Nothing buffered and the authority down: now unready, naming the namespace.
    let unready = node.get("/readyz").await;
    assert_error(&unready, 503, "authority_unavailable");
    let why = unready.1["error"]["message"].as_str().unwrap();
    assert!(
        why.contains("\"orders\"") && why.contains("no ids buffered"),
        "{why}"
    );
    // Still down: still 503, never a stale or repeated id.
    assert_error(
        &node.get("/v1/ids/orders?count=3").await,
        503,
        "authority_unavailable",
    );
    let (_, info) = node.get("/v1/namespaces/orders").await;
    assert!(info["state"]["last_error"].is_string(), "{info}");

    authority.set_down(false);
    // The refill task retries with a backoff of at most 2 s: poll until a request succeeds.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let got = node.get("/v1/ids/orders?count=5").await;
        if got.0 == 200 {
            served.extend(ids_of(&got.1, "orders", 5).iter().map(|s| parse_decimal(s)));
            break;
        }
        assert_error(&got, 503, "authority_unavailable");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the node did not recover"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    served.extend(node.ids("orders", 300).await);
    assert_strictly_increasing(&served);
    let (status, ready) = node.get("/readyz").await;
    assert_eq!(
        (status, &ready["status"]),
        (200, &"ready".into()),
        "{ready}"
    );
    assert_eq!(ready["authority_up"], true, "{ready}");
    node.stop().await;
}

/// A node whose authority does not answer at start starts anyway, unready: its declared
/// namespace answers 503 `authority_unavailable` (never an unknown namespace, never an id),
/// `/readyz` names it, and `idmint_ready` is 0. Once the authority answers the node sets the
/// namespace up by itself and turns ready, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_starts_while_its_authority_is_down_and_turns_ready_when_it_answers() {
    let authority = Arc::new(FlakyAuthority::default());
    authority.set_down(true);
    let cfg = config(
        r#"
        [server]
        auto_create = false
        [namespaces.orders]
        kind = "sequence"
        [namespaces.sessions]
        kind = "uuid7"
        "#,
    );
    let node = TestNode::start(cfg, authority.clone()).await;
    let unready = node.get("/readyz").await;
    assert_error(&unready, 503, "authority_unavailable");
    let why = unready.1["error"]["message"].as_str().unwrap();
    assert!(
        why.contains("\"orders\"") && why.contains("not set up yet"),
        "{why}"
    );
    assert!(
        !why.contains("sessions"),
        "a UUIDv7 namespace needs no authority: {why}"
    );
    assert_error(
        &node.get("/v1/ids/orders").await,
        503,
        "authority_unavailable",
    );
    assert_error(
        &node.get("/v1/namespaces/orders").await,
        503,
        "authority_unavailable",
    );
    assert_eq!(node.get("/v1/ids/sessions").await.0, 200);
    let (_, metrics) = node.text("/metrics").await;
    for line in ["idmint_ready 0\n", "idmint_authority_up 0\n"] {
        assert!(metrics.contains(line), "{line}{metrics}");
    }

    authority.set_down(false);
    let n = &node;
    poll_until("the node turns ready", move || async move {
        n.get("/readyz").await.0 == 200
    })
    .await;
    let ids: Vec<u64> = node.ids("orders", 100).await;
    assert_strictly_increasing(&ids);
    let (_, metrics) = node.text("/metrics").await;
    for line in ["idmint_ready 1\n", "idmint_authority_up 1\n"] {
        assert!(metrics.contains(line), "{line}{metrics}");
    }
    node.stop().await;
}

/// Blocks for lower tiers come from the same buffer: their ids are never served by
/// `/v1/ids`, before or after, and they keep the namespace's step and class.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_are_disjoint_from_served_ids() {
    let node = TestNode::start(
        config(
            r#"
            [namespaces.plain]
            kind = "sequence"
            [namespaces.odd]
            kind = "sequence"
            step = 2
            offset = 1
            [namespaces.ticket]
            kind = "sequence"
            cache = "off"
            "#,
        ),
        memory(),
    )
    .await;
    for ns in ["plain", "odd", "ticket"] {
        let mut served: Vec<u64> = Vec::new();
        let mut blocks: Vec<(u64, u64, u64)> = Vec::new();
        for round in 0..20 {
            served.extend(node.ids(ns, 1 + round * 7).await);
            let (status, b) = node.post(&format!("/v1/blocks/{ns}?count=500")).await;
            assert_eq!(status, 200, "{b}");
            let start = parse_decimal(b["start"].as_str().unwrap());
            let end = parse_decimal(b["end"].as_str().unwrap());
            let step = b["step"].as_u64().unwrap();
            assert!(start < end, "{b}");
            let len = (end - start).div_ceil(step);
            assert!((1..=500).contains(&len), "{b}");
            if ns == "odd" {
                assert_eq!((step, start % 2), (2, 1), "{b}");
            } else {
                assert_eq!(step, 1, "{b}");
            }
            blocks.push((start, end, step));
        }
        served.extend(node.ids(ns, 1000).await);
        assert_strictly_increasing(&served);
        blocks.sort_unstable();
        for pair in blocks.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "blocks overlap: {pair:?}");
        }
        for id in &served {
            let inside = blocks.iter().find(|(s, e, _)| (s..e).contains(&id));
            assert!(
                inside.is_none(),
                "{ns}: id {id} was also given out in block {inside:?}"
            );
        }
    }
    // Default count 1 for blocks too.
    let (status, b) = node.post("/v1/blocks/plain").await;
    assert_eq!(status, 200, "{b}");
    let start = parse_decimal(b["start"].as_str().unwrap());
    assert_eq!(parse_decimal(b["end"].as_str().unwrap()), start + 1);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_health_ready_and_metrics() {
    let node = TestNode::start(
        config(
            r#"
            [namespaces.tweets]
            kind = "snowflake"
            worker = 3
            [namespaces.sessions]
            kind = "uuid7"
            [namespaces.tickets]
            kind = "sequence"
            width = 32
            "#,
        ),
        memory(),
    )
    .await;
    assert_eq!(node.get("/healthz").await.0, 200);
    let (status, ready) = node.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["authority"], "memory");

    node.ids("photos", 10).await;
    node.ids("tickets", 10).await;
    node.ids("tweets", 10).await;

    let (status, list) = node.get("/v1/namespaces").await;
    assert_eq!(status, 200, "{list}");
    let names: Vec<&str> = list["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["photos", "sessions", "tickets", "tweets"],
        "sorted by name"
    );

    for ns in ["photos", "tickets"] {
        let (status, info) = node.get(&format!("/v1/namespaces/{ns}")).await;
        assert_eq!(status, 200, "{info}");
        let state = &info["state"];
        for field in [
            "watermark",
            "ids_buffered",
            "demand_per_second",
            "block_size",
            "ids_burned",
            "used_fraction",
            "projected_exhaustion",
            "projection_window_seconds",
        ] {
            assert!(state.get(field).is_some(), "{ns}: no state.{field}: {info}");
        }
        // The watermark is above everything served (invariant 1, seen from outside).
        let watermark = parse_decimal(state["watermark"].as_str().unwrap());
        assert!(watermark > 10, "{info}");
        assert_eq!(state["ids_burned"], 0, "{info}");
        let used = state["used_fraction"].as_f64().unwrap();
        assert!(used > 0.0 && used < 1.0, "{info}");
    }
    let (_, info) = node.get("/v1/namespaces/tweets").await;
    assert_eq!(info["settings"]["worker"], 3, "{info}");
    assert_eq!(info["state"]["ids_served"], 10, "{info}");

    let (status, text) = node.request(reqwest::Method::GET, "/metrics").await;
    assert_eq!(status, 200);
    for ns in ["photos", "tickets", "tweets"] {
        let series = format!("idmint_ids_served_total{{namespace=\"{ns}\"}} 10");
        assert!(text.contains(&series), "no {series:?} in:\n{text}");
    }
    for ns in ["photos", "tickets"] {
        for family in [
            "idmint_sequence_used_ratio",
            "idmint_sequence_time_to_exhaustion_seconds",
        ] {
            let series = format!("{family}{{namespace=\"{ns}\"}} ");
            assert!(text.contains(&series), "no {series:?} in:\n{text}");
        }
    }
    node.stop().await;
}

/// 8 clients x 2000 requests of 1 to 20 ids on one namespace over HTTP: every id unique, each
/// client's ids strictly increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_get_unique_increasing_ids() {
    let node = Arc::new(TestNode::start(NodeConfig::default(), memory()).await);
    let mut tasks = Vec::new();
    for client in 0..8u64 {
        let node = node.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            for request in 0..2000u64 {
                let count = (client * 7 + request * 13) % 20 + 1;
                mine.extend(node.ids("hot", count).await);
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let mine = task.await.unwrap();
        assert_strictly_increasing(&mine);
        all.extend(mine);
    }
    let total = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), total, "{} duplicate ids", total - all.len());
    println!("concurrent: {total} ids, no duplicates");
    Arc::into_inner(node).unwrap().stop().await;
}

async fn open_file_authority(dir: &std::path::Path) -> Arc<FileAuthority> {
    let dir = dir.to_owned();
    Arc::new(
        tokio::task::spawn_blocking(move || FileAuthority::open(&dir))
            .await
            .unwrap()
            .unwrap(),
    )
}

/// A clean shutdown hands back the unused tail (invariant 2's compare-and-swap): the durable
/// watermark ends up exactly one past the last served id, nothing burned, and the next node on
/// the same store continues exactly there (invariant 3: nothing handed out twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_shutdown_hands_back_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let name = NamespaceName::new("photos").unwrap();
    let authority = open_file_authority(dir.path()).await;
    let node = TestNode::start(NodeConfig::default(), authority.clone()).await;
    let mut served = Vec::new();
    for count in [1, 5, 50, 500, 3] {
        served.extend(node.ids("photos", count).await);
    }
    let last = *served.last().unwrap();
    // Let the background refill land so that there is a tail to hand back.
    let (a, n) = (&authority, &name);
    poll_until(
        "a refill reserved ids beyond the last served one",
        move || async move { a.state(n).await.unwrap().unwrap().watermark > last + 1 },
    )
    .await;
    drop(authority);
    let report = node.stop().await;
    assert_eq!(report.burned, 0, "{report:?}");
    assert!(report.given_back > 0, "{report:?}");

    let authority = open_file_authority(dir.path()).await;
    let state = authority.state(&name).await.unwrap().unwrap();
    assert_eq!(
        state.watermark,
        last + 1,
        "the tail was not handed back exactly"
    );

    let node = TestNode::start(NodeConfig::default(), authority.clone()).await;
    assert_eq!(node.ids("photos", 1).await, [last + 1]);
    assert_eq!(node.ids("photos", 2).await, [last + 2, last + 3]);
    drop(authority);
    node.stop().await;
}

/// `method path` with the answer's headers: status, headers, body text.
async fn request_with_headers(
    node: &TestNode,
    method: reqwest::Method,
    path: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let resp = node
        .client
        .request(method.clone(), format!("{}{path}", node.base))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.text().await.unwrap())
}

/// Reads must not write: `GET /v1/namespaces/{ns}` and `GET /v1/decode/{ns}/{id}` on an
/// unknown name do not auto-create it nor durably reserve its first block. They answer 404
/// `unknown_namespace`, and the authority holds nothing, even with `auto_create` on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_an_unknown_namespace_create_nothing() {
    let authority = Arc::new(MemoryAuthority::new());
    let node = TestNode::start(NodeConfig::default(), authority.clone()).await;
    for path in [
        "/v1/namespaces/ghost",
        "/v1/decode/ghost/1",
        "/v1/decode/ghost/not-even-an-id",
    ] {
        let answer = node.get(path).await;
        assert_error(&answer, 404, "unknown_namespace");
        let message = answer.1["error"]["message"].as_str().unwrap();
        assert!(message.contains("reads do not create"), "{message}");
        // HEAD runs the same read: also nothing created.
        let (status, _) = node.request(reqwest::Method::HEAD, path).await;
        assert_eq!(status, 404, "HEAD {path}");
    }
    let name = NamespaceName::new("ghost").unwrap();
    assert_eq!(authority.state(&name).await.unwrap(), None);
    assert!(authority.list().await.unwrap().is_empty());
    let (_, list) = node.get("/v1/namespaces").await;
    assert_eq!(list["namespaces"], serde_json::json!([]), "{list}");
    // A request for ids still creates it.
    assert_eq!(node.ids("ghost", 1).await, [1]);
    assert!(authority.state(&name).await.unwrap().is_some());
    node.stop().await;
}

/// The companion of the above: a namespace the authority knows but this node has not
/// loaded (created before a restart) is readable from the stored state, without installing it:
/// no reservation (the durable watermark stays put), nothing buffered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_reads_a_stored_namespace_without_reserving() {
    let dir = tempfile::tempdir().unwrap();
    let name = NamespaceName::new("photos").unwrap();
    let authority = open_file_authority(dir.path()).await;
    let node = TestNode::start(NodeConfig::default(), authority.clone()).await;
    assert_eq!(node.ids("photos", 5).await, [1, 2, 3, 4, 5]);
    drop(authority);
    node.stop().await;

    let authority = open_file_authority(dir.path()).await;
    let stored = authority.state(&name).await.unwrap().unwrap().watermark;
    let node = TestNode::start(NodeConfig::default(), authority.clone()).await;
    let (status, info) = node.get("/v1/namespaces/photos").await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["kind"], "sequence", "{info}");
    assert_eq!(info["state"]["watermark"], stored.to_string(), "{info}");
    assert_eq!(info["state"]["ids_buffered"], 0, "{info}");
    let (status, d) = node.get("/v1/decode/photos/3").await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(d["issued"], true, "{d}");
    let (_, d) = node.get(&format!("/v1/decode/photos/{stored}")).await;
    assert_eq!(d["issued"], false, "{d}");
    assert_eq!(
        authority.state(&name).await.unwrap().unwrap().watermark,
        stored,
        "a read reserved ids"
    );
    // Not installed: not listed as served.
    let (_, list) = node.get("/v1/namespaces").await;
    assert_eq!(list["namespaces"], serde_json::json!([]), "{list}");
    // Ids continue after everything the first node served.
    assert_eq!(node.ids("photos", 1).await, [6]);
    drop(authority);
    node.stop().await;
}

/// Guards against `HEAD /v1/ids/{ns}` consuming an id (and auto-creating the namespace): axum
/// answers HEAD with the GET handler. HEAD on the id routes is 405 with `Allow` and a JSON
/// body, and takes nothing: the next GET of a fresh namespace still gets id 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_on_id_routes_is_refused_and_takes_nothing() {
    let authority = Arc::new(MemoryAuthority::new());
    let node = TestNode::start(NodeConfig::default(), authority.clone()).await;
    for (path, allow) in [("/v1/ids/fresh", "GET"), ("/v1/blocks/fresh", "POST")] {
        for _ in 0..3 {
            let (status, headers, _) =
                request_with_headers(&node, reqwest::Method::HEAD, path).await;
            assert_eq!(status, 405, "HEAD {path}");
            assert_eq!(headers[reqwest::header::ALLOW], allow, "HEAD {path}");
        }
    }
    let name = NamespaceName::new("fresh").unwrap();
    assert_eq!(authority.state(&name).await.unwrap(), None);
    assert_eq!(node.ids("fresh", 1).await, [1]);
    node.stop().await;
}

/// Guards against id answers stored by a cache and replayed (duplicate ids): every answer of
/// the id routes says `Cache-Control: no-store`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn id_answers_are_not_cacheable() {
    let node = TestNode::start(NodeConfig::default(), memory()).await;
    for (method, path) in [
        (reqwest::Method::GET, "/v1/ids/photos?count=2"),
        (reqwest::Method::POST, "/v1/blocks/photos?count=10"),
        (reqwest::Method::GET, "/v1/ids/photos?count=0"),
    ] {
        let (status, headers, body) = request_with_headers(&node, method.clone(), path).await;
        assert!(status == 200 || status == 400, "{method} {path}: {body}");
        assert_eq!(
            headers
                .get(reqwest::header::CACHE_CONTROL)
                .map(|v| v.to_str().unwrap()),
            Some("no-store"),
            "{method} {path}"
        );
    }
    node.stop().await;
}

/// Guards against a panic in the RFC 3339 formatter (and a reset connection) when decoding a
/// ULID or UUIDv7 whose timestamp lies after the year 9999. It answers JSON: `timestamp` null,
/// `unix_ms` set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decode_of_a_time_past_9999_answers_json() {
    let node = TestNode::start(
        config("[namespaces.uploads]\nkind = \"ulid\"\n[namespaces.sessions]\nkind = \"uuid7\"\n"),
        memory(),
    )
    .await;
    for path in [
        "/v1/decode/uploads/7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
        "/v1/decode/sessions/ffffffff-ffff-7fff-bfff-ffffffffffff",
    ] {
        let (status, d) = node.get(path).await;
        assert_eq!(status, 200, "{path}: {d}");
        assert_eq!(d["timestamp"], Value::Null, "{d}");
        assert_eq!(d["unix_ms"], 281_474_976_710_655u64, "{d}");
    }
    // The last writable millisecond still has its date.
    let (_, d) = node
        .get("/v1/decode/sessions/e677d21f-dbff-7fff-bfff-ffffffffffff")
        .await;
    assert_eq!(d["timestamp"], "9999-12-31T23:59:59.999Z", "{d}");
    node.stop().await;
}

/// Query values are percent-decoded (`count=%33` is 3, not refused) and a repeated `count` is
/// refused, not taken silently (`count=2&count=3` does not give 3 ids).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_values_are_percent_decoded_and_given_once() {
    let node = TestNode::start(NodeConfig::default(), memory()).await;
    let (status, body) = node.get("/v1/ids/photos?count=%33").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ids_of(&body, "photos", 3), ["1", "2", "3"]);
    let (status, body) = node.get("/v1/ids/photos?%63ount=2").await;
    assert_eq!(status, 200, "{body}");
    ids_of(&body, "photos", 2);
    let (status, body) = node.post("/v1/blocks/photos?count=%31%30").await;
    assert_eq!(status, 200, "{body}");
    for path in [
        "/v1/ids/photos?count=2&count=3",
        "/v1/ids/photos?count=2&count=2",
    ] {
        let answer = node.get(path).await;
        assert_error(&answer, 400, "invalid_request");
        assert!(
            answer.1["error"]["message"]
                .as_str()
                .unwrap()
                .contains("count"),
            "{}",
            answer.1
        );
    }
    assert_error(
        &node.post("/v1/blocks/photos?count=1&count=1").await,
        400,
        "invalid_request",
    );
    assert_error(
        &node.get("/v1/ids/photos?count=%FF").await,
        400,
        "invalid_count",
    );
    node.stop().await;
}

/// A 405 names the methods of the route it answers (not "(ids: GET, blocks: POST)" on
/// `/healthz` and `/metrics`): JSON, with the `Allow` header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_not_allowed_names_the_routes_methods() {
    let node = TestNode::start(NodeConfig::default(), memory()).await;
    let cases = [
        (reqwest::Method::POST, "/healthz", "GET, HEAD"),
        (reqwest::Method::DELETE, "/metrics", "GET, HEAD"),
        (reqwest::Method::PUT, "/readyz", "GET, HEAD"),
        (reqwest::Method::POST, "/v1/namespaces", "GET, HEAD"),
        (reqwest::Method::POST, "/v1/namespaces/x", "GET, HEAD"),
        (reqwest::Method::POST, "/v1/decode/x/1", "GET, HEAD"),
        (reqwest::Method::POST, "/v1/ids/x", "GET"),
        (reqwest::Method::GET, "/v1/blocks/x", "POST"),
    ];
    for (method, path, allow) in cases {
        let (status, headers, text) = request_with_headers(&node, method.clone(), path).await;
        let answer = (status, support::json(&text));
        assert_error(&answer, 405, "method_not_allowed");
        let message = answer.1["error"]["message"].as_str().unwrap();
        assert!(!message.contains("ids: GET"), "{method} {path}: {message}");
        assert!(
            message.contains(allow) && message.contains(method.as_str()),
            "{method} {path}: {message}"
        );
        assert_eq!(headers[reqwest::header::ALLOW], allow, "{method} {path}");
    }
    node.stop().await;
}

/// A path that is not UTF-8 once percent-decoded is JSON `invalid_request` (not axum's
/// plain-text 400), on every route with path parameters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_is_not_utf8_is_a_json_400() {
    let node = TestNode::start(NodeConfig::default(), memory()).await;

    for path in [
        "/v1/ids/%FF",
        "/v1/namespaces/%FF%FE",
        "/v1/decode/x/%C3",
        "/v1/decode/%FF/1",
    ] {
        let (status, headers, text) = request_with_headers(&node, reqwest::Method::GET, path).await;
        assert_error(&(status, support::json(&text)), 400, "invalid_request");
        assert_eq!(
            headers[reqwest::header::CONTENT_TYPE],
            "application/json",
            "{path}"
        );
    }
    let (status, _, text) =
        request_with_headers(&node, reqwest::Method::POST, "/v1/blocks/%FF").await;
    assert_error(&(status, support::json(&text)), 400, "invalid_request");
    node.stop().await;
}

/// Request targets over 8 KiB are a JSON 414 `invalid_request` (not an empty 414, nor, below
/// hyper's limit, whatever the route makes of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_request_target_is_a_json_414() {
    let node = TestNode::start(NodeConfig::default(), memory()).await;
    // A long request target: JSON 414 from the router (up to hyper's own limit of 64 KiB,
    // above which hyper answers an empty 414 before any route runs).
    let long = format!("/v1/ids/{}", "a".repeat(10_000));
    assert_error(&node.get(&long).await, 414, "invalid_request");
    let long_query = format!("/v1/ids/x?count={}", "1".repeat(9_000));
    assert_error(&node.get(&long_query).await, 414, "invalid_request");
    // At the limit, the route answers.
    let at_limit = format!(
        "/v1/ids/x?count={}",
        "1".repeat(8 * 1024 - "/v1/ids/x?count=".len())
    );
    assert_error(&node.get(&at_limit).await, 400, "invalid_count");
    node.stop().await;
}

/// `GET /openapi.json` is the document of this server: it parses, names every route, carries
/// the node's `count` limits, and may be cached; `HEAD` answers it without a body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document_is_served_with_the_nodes_limits() {
    let node = TestNode::start(
        config("[server]\nmax_count = 5\nmax_block_request = 70\n"),
        memory(),
    )
    .await;
    let resp = node
        .client
        .get(format!("{}/openapi.json", node.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(resp.headers()["cache-control"], "public, max-age=300");
    let doc: Value = support::json(&resp.text().await.unwrap());
    assert_eq!(doc, idmint_node::http::openapi::document(5, 70));
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"), "{doc}");
    for path in [
        "/v1/ids/{namespace}",
        "/v1/blocks/{namespace}",
        "/v1/decode/{namespace}/{id}",
        "/v1/namespaces",
        "/v1/namespaces/{namespace}",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} missing");
    }
    let count = |path: &str, method: &str| {
        doc["paths"][path][method]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "count")
            .unwrap()["schema"]["maximum"]
            .clone()
    };
    assert_eq!(count("/v1/ids/{namespace}", "get"), 5);
    assert_eq!(count("/v1/blocks/{namespace}", "post"), 70);
    let (status, body) = node.request(reqwest::Method::HEAD, "/openapi.json").await;
    assert_eq!((status, body.as_str()), (200, ""));
    // A read: it created nothing.
    assert_eq!(
        node.get("/v1/namespaces").await.1["namespaces"],
        serde_json::json!([])
    );
    let (status, _) = node.post("/openapi.json").await;
    assert_eq!(status, 405);
    node.stop().await;
}

/// `GET /` and `GET /ui` are the status page: HTML, a read that creates nothing; other methods
/// are the JSON 405 of every route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_is_html_and_a_read() {
    let node = TestNode::start(NodeConfig::default(), memory()).await;
    node.ids("photos", 3).await;
    for path in ["/", "/ui"] {
        let resp = node
            .client
            .get(format!("{}{path}", node.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(
            resp.headers()["content-type"],
            "text/html; charset=utf-8",
            "{path}"
        );
        let page = resp.text().await.unwrap();
        assert!(page.contains("<tr id=\"ns-photos\">"), "{page}");
        assert!(page.contains("kind <b>memory</b>"), "{page}");
    }
    let names: Vec<Value> = node.get("/v1/namespaces").await.1["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ns| ns["namespace"].clone())
        .collect();
    assert_eq!(
        names,
        vec![Value::from("photos")],
        "the page created a namespace"
    );
    assert_error(&node.post("/").await, 405, "method_not_allowed");
    node.stop().await;
}
