//! End-to-end tests of the gRPC API (`idmint.v1`, docs/grpc.md) against nodes served in process
//! by `serve_front_ends` with the HTTP and gRPC front-ends side by side on `127.0.0.1:0`, each
//! node on its own memory authority, driven by the tonic client generated from the same
//! `.proto`; and by Python's `grpcio`, a client idmint did not write (`tests/grpc_client.py`).
//!
//! What is checked: every method round trip, every kind's ids and decoding; each error's gRPC
//! code and `idmint-error-code`; `NextStream` totals, chunk sizes, uniqueness over a million
//! ids, and backpressure (a client that stops reading stops the taking); `GiveBack` accepts
//! exactly the newest lease's tail once and refuses anything that could repeat an id; reads
//! never create namespaces; shutdown ends streams with `shutting_down` and still hands back.
//!
//! No test sleeps to order events: every wait polls a condition against a generous deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use idmint_node::grpc::proto::idmint_client::IdmintClient;
use idmint_node::grpc::proto::{self, ids::Ids as IdsKind};
use idmint_node::{FileConfig, Node, NodeConfig, Shutdown, ShutdownReport};
use idmint_store::MemoryAuthority;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

const DEADLINE: Duration = Duration::from_secs(30);

/// A node serving HTTP and gRPC.
struct GrpcNode {
    grpc: SocketAddr,
    http: SocketAddr,
    shutdown: Shutdown,
    served: tokio::task::JoinHandle<Result<ShutdownReport, idmint_node::NodeError>>,
}

impl GrpcNode {
    async fn start(config: NodeConfig) -> GrpcNode {
        let node = Node::start(config, Arc::new(MemoryAuthority::new()))
            .await
            .unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (http_addr, grpc_addr) = (http.local_addr().unwrap(), grpc.local_addr().unwrap());
        let server = idmint_node::Server::new(node).http(http).grpc(grpc);
        let shutdown = server.shutdown_handle();
        let served = tokio::spawn(server.serve());
        GrpcNode {
            grpc: grpc_addr,
            http: http_addr,
            shutdown,
            served,
        }
    }

    async fn client(&self) -> IdmintClient<Channel> {
        let channel = Endpoint::from_shared(format!("http://{}", self.grpc))
            .unwrap()
            .connect()
            .await
            .unwrap();
        IdmintClient::new(channel)
    }

    /// A client whose HTTP/2 receive windows are the protocol's default 64 KiB (tonic's are
    /// megabytes), so flow control holds back a stream after a few chunks.
    async fn small_window_client(&self) -> IdmintClient<Channel> {
        let channel = Endpoint::from_shared(format!("http://{}", self.grpc))
            .unwrap()
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535)
            .connect()
            .await
            .unwrap();
        IdmintClient::new(channel)
    }

    async fn stop(self) -> ShutdownReport {
        self.shutdown.drain();
        tokio::time::timeout(DEADLINE, self.served)
            .await
            .expect("the node stops")
            .unwrap()
            .unwrap()
    }
}

fn config(toml: &str) -> NodeConfig {
    FileConfig::parse(toml).unwrap().node
}

const KINDS: &str = r#"
    [namespaces.photos]
    kind = "sequence"
    cache = "fixed"
    block_size = 1000

    [namespaces.tickets]
    kind = "sequence"
    cache = "off"

    [namespaces.tweets]
    kind = "snowflake"
    layout = "twitter"
    worker = 7

    [namespaces.grams]
    kind = "snowflake"
    layout = "instagram"
    worker = 5

    [namespaces.sessions]
    kind = "uuid7"

    [namespaces.events]
    kind = "ulid"
"#;

async fn next(c: &mut IdmintClient<Channel>, ns: &str, count: u64) -> proto::Ids {
    next_of(c, ns, Some(count)).await
}

/// `Next` with `count` as given (unset when `None`).
async fn next_of(c: &mut IdmintClient<Channel>, ns: &str, count: Option<u64>) -> proto::Ids {
    c.next(proto::NextRequest {
        namespace: ns.into(),
        count,
        shard: None,
        key: None,
    })
    .await
    .unwrap_or_else(|e| panic!("Next {ns} {count:?}: {e:?}"))
    .into_inner()
}

fn u64s(ids: proto::Ids) -> Vec<u64> {
    match ids.ids {
        Some(IdsKind::U64(v)) => v.ids,
        other => panic!("not 64-bit ids: {other:?}"),
    }
}

fn strictly_increasing<T: Ord + std::fmt::Debug>(ids: &[T]) {
    for pair in ids.windows(2) {
        assert!(pair[0] < pair[1], "not increasing: {pair:?}");
    }
}

/// The error code and the idmint code of a failed call.
fn codes<T>(result: Result<tonic::Response<T>, tonic::Status>) -> (Code, String) {
    let Err(status) = result else {
        panic!("the call must fail")
    };
    let idmint = status
        .metadata()
        .get("idmint-error-code")
        .unwrap_or_else(|| panic!("no idmint-error-code: {status:?}"))
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        status.message().starts_with(&format!("{idmint}: ")),
        "the message starts with the code: {status:?}"
    );
    (status.code(), idmint)
}

#[tokio::test]
async fn every_kind_round_trips_and_decodes() {
    let node = GrpcNode::start(config(KINDS)).await;
    let mut c = node.client().await;

    // Sequences (buffered and cache off); an unset count means 1, 0 is refused as over HTTP.
    let photos = next(&mut c, "photos", 5).await;
    assert_eq!(photos.namespace, "photos");
    let photos = u64s(photos);
    assert_eq!(photos, [1, 2, 3, 4, 5]);
    assert_eq!(u64s(next_of(&mut c, "photos", None).await), [6]);
    let zero = c
        .next(proto::NextRequest {
            namespace: "photos".into(),
            count: Some(0),
            shard: None,
            key: None,
        })
        .await
        .unwrap_err();
    assert_eq!(zero.code(), tonic::Code::InvalidArgument);
    assert_eq!(u64s(next(&mut c, "tickets", 3).await), [1, 2, 3]);

    // Snowflake: increasing, worker 7 when decoded.
    let tweets = u64s(next(&mut c, "tweets", 100).await);
    assert_eq!(tweets.len(), 100);
    strictly_increasing(&tweets);
    let d = c
        .decode(proto::DecodeRequest {
            namespace: "tweets".into(),
            id: tweets[0].to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    match d.kind {
        Some(proto::decoded::Kind::Snowflake(s)) => {
            assert_eq!(
                (s.id, s.node),
                (tweets[0], Some(proto::decoded_snowflake::Node::Worker(7)))
            );
            assert!(
                s.timestamp.ends_with('Z') && s.unix_ms > 1_600_000_000_000,
                "{s:?}"
            );
        }
        other => panic!("{other:?}"),
    }

    // An instagram-layout id's node field is its shard.
    let gram = u64s(next(&mut c, "grams", 1).await)[0];
    let d = c
        .decode(proto::DecodeRequest {
            namespace: "grams".into(),
            id: gram.to_string(),
        })
        .await
        .unwrap()
        .into_inner();
    match d.kind {
        Some(proto::decoded::Kind::Snowflake(s)) => {
            assert_eq!(
                s.node,
                Some(proto::decoded_snowflake::Node::Shard(5)),
                "{s:?}"
            );
        }
        other => panic!("{other:?}"),
    }

    // Sequence decode: issued below the watermark, not above it.
    let d = c
        .decode(proto::DecodeRequest {
            namespace: "photos".into(),
            id: "3".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        d.kind,
        Some(proto::decoded::Kind::Sequence(proto::DecodedSequence {
            id: 3,
            in_namespace: true,
            issued: true,
            step: 1,
            residue: 0,
            member: None,
        }))
    );

    // 128-bit kinds: 16 bytes each, increasing, decodable from their text.
    for (ns, want) in [("sessions", "uuid7"), ("events", "ulid")] {
        let ids = next(&mut c, ns, 50).await;
        let bytes = match (ids.ids, want) {
            (Some(IdsKind::Uuid7(b)), "uuid7") | (Some(IdsKind::Ulid(b)), "ulid") => b.ids,
            (other, _) => panic!("{ns}: {other:?}"),
        };
        assert_eq!(bytes.len(), 50);
        assert!(bytes.iter().all(|b| b.len() == 16));
        strictly_increasing(&bytes);
        let text = match want {
            "uuid7" => idmint_core::Uuid7::from_bytes(bytes[0].clone().try_into().unwrap())
                .unwrap()
                .to_string(),
            _ => idmint_core::Ulid::from_bytes(bytes[0].clone().try_into().unwrap()).to_string(),
        };
        let d = c
            .decode(proto::DecodeRequest {
                namespace: ns.into(),
                id: text.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        let t = match d.kind {
            Some(proto::decoded::Kind::Uuid7(t)) | Some(proto::decoded::Kind::Ulid(t)) => t,
            other => panic!("{other:?}"),
        };
        assert_eq!((t.id, t.bytes), (text, bytes[0].clone()));
        assert!(t.timestamp.is_some() && t.unix_ms > 1_600_000_000_000);
    }
    node.stop().await;
}

#[tokio::test]
async fn namespaces_describe_settings_and_state_and_reads_create_nothing() {
    let node = GrpcNode::start(config(KINDS)).await;
    let mut c = node.client().await;
    next(&mut c, "photos", 10).await;
    next(&mut c, "tweets", 1).await;
    let list = c
        .namespaces(proto::NamespacesRequest {})
        .await
        .unwrap()
        .into_inner()
        .namespaces;
    let names: HashSet<_> = list.iter().map(|n| n.namespace.as_str()).collect();
    assert_eq!(
        names,
        HashSet::from(["photos", "tickets", "tweets", "grams", "sessions", "events"])
    );
    let photos = c
        .namespace(proto::NamespaceRequest {
            namespace: "photos".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let Some(proto::namespace_info::Kind::Sequence(s)) = photos.kind else {
        panic!("{photos:?}")
    };
    let settings = s.settings.unwrap();
    assert_eq!((settings.width, settings.start, settings.step), (64, 1, 1));
    assert_eq!(settings.cache(), proto::CacheMode::Fixed);
    assert_eq!(settings.block_size, 1000);
    let state = s.state.unwrap();
    assert_eq!(state.ids_served, 10);
    assert!(
        state.watermark > 10 && state.capacity == (1 << 63) - 1,
        "{state:?}"
    );
    let tweets = list.iter().find(|n| n.namespace == "tweets").unwrap();
    let Some(proto::namespace_info::Kind::Snowflake(t)) = &tweets.kind else {
        panic!("{tweets:?}")
    };
    let layout = t.layout.as_ref().unwrap();
    assert_eq!(t.worker, 7);
    assert_eq!(
        (
            layout.timestamp_bits,
            layout.node_bits,
            layout.sequence_bits
        ),
        (41, 10, 12)
    );
    assert_eq!(layout.order(), proto::FieldOrder::NodeThenSequence);
    assert!(t.last_timestamp.is_some());
    // Foresight, as in the HTTP detail: the worker pool read live from the authority (this
    // node's fixed worker 7 is a lease too), the sequence headroom, the time left.
    let pool = t.worker_pool.as_ref().unwrap();
    assert_eq!(
        (
            pool.group.as_str(),
            pool.possible,
            pool.held,
            pool.error.as_deref()
        ),
        ("tweets", 1024, Some(1), None)
    );
    let headroom = t.sequence_headroom.as_ref().unwrap();
    assert_eq!(headroom.limit_per_unit, 4096);
    assert!(headroom.peak_per_unit >= 1, "{headroom:?}");
    assert!(t.seconds_to_exhaustion > 0, "{t:?}");

    // A read of an unknown name (auto_create on) is NOT_FOUND and creates nothing.
    let (code, idmint) = codes(
        c.namespace(proto::NamespaceRequest {
            namespace: "nobody".into(),
        })
        .await,
    );
    assert_eq!(
        (code, idmint.as_str()),
        (Code::NotFound, "unknown_namespace")
    );
    let (code, _) = codes(
        c.decode(proto::DecodeRequest {
            namespace: "nobody".into(),
            id: "1".into(),
        })
        .await,
    );
    assert_eq!(code, Code::NotFound);
    let after = c
        .namespaces(proto::NamespacesRequest {})
        .await
        .unwrap()
        .into_inner()
        .namespaces;
    assert_eq!(after.len(), 6, "reads created a namespace");
    node.stop().await;
}

#[tokio::test]
async fn every_error_has_its_grpc_code_and_idmint_code() {
    let mut cfg = config(
        r#"
        [server]
        auto_create = false
        max_count = 100
        max_block_request = 1000

        [namespaces.photos]
        kind = "sequence"

        [namespaces.small]
        kind = "sequence"
        width = 32
        start = 2147483600
        cache = "fixed"
        block_size = 10

        [namespaces.sessions]
        kind = "uuid7"
        "#,
    );
    cfg.refill_wait = Duration::from_millis(500);
    let node = GrpcNode::start(cfg).await;
    let mut c = node.client().await;
    let req = |ns: &str, count: u64| proto::NextRequest {
        namespace: ns.into(),
        count: Some(count),
        shard: None,
        key: None,
    };
    let cases: Vec<(Code, &str, (Code, String))> = vec![
        (
            Code::InvalidArgument,
            "invalid_namespace",
            codes(c.next(req("-bad", 1)).await),
        ),
        (
            Code::InvalidArgument,
            "invalid_count",
            codes(c.next(req("photos", 101)).await),
        ),
        (
            Code::NotFound,
            "unknown_namespace",
            codes(c.next(req("nobody", 1)).await),
        ),
        (
            Code::InvalidArgument,
            "invalid_count",
            codes(
                c.block(proto::BlockRequest {
                    namespace: "photos".into(),
                    count: Some(1001),
                    min_start: None,
                    extends: None,
                })
                .await,
            ),
        ),
        (
            Code::FailedPrecondition,
            "wrong_kind",
            codes(
                c.block(proto::BlockRequest {
                    namespace: "sessions".into(),
                    count: Some(1),
                    min_start: None,
                    extends: None,
                })
                .await,
            ),
        ),
        (
            Code::InvalidArgument,
            "invalid_id",
            codes(
                c.decode(proto::DecodeRequest {
                    namespace: "sessions".into(),
                    id: "not-a-uuid".into(),
                })
                .await,
            ),
        ),
        (
            Code::InvalidArgument,
            "invalid_request",
            codes(
                c.give_back(proto::GiveBackRequest {
                    namespace: "photos".into(),
                    start: 10,
                    end: 5,
                    step: 1,
                    lease: 1,
                })
                .await,
            ),
        ),
        (
            Code::FailedPrecondition,
            "wrong_kind",
            codes(
                c.give_back(proto::GiveBackRequest {
                    namespace: "sessions".into(),
                    start: 1,
                    end: 5,
                    step: 1,
                    lease: 1,
                })
                .await,
            ),
        ),
    ];
    for (code, idmint, got) in cases {
        assert_eq!(got, (code, idmint.to_owned()));
    }
    for (total, chunk) in [(0, 10), (100_000_001, 10), (10, 101)] {
        let got = codes(
            c.next_stream(proto::NextStreamRequest {
                namespace: "photos".into(),
                total,
                chunk: Some(chunk),
            })
            .await,
        );
        assert_eq!(
            got,
            (Code::InvalidArgument, "invalid_count".into()),
            "{total} {chunk}"
        );
    }

    // A 32-bit namespace running out: the rest, then RESOURCE_EXHAUSTED, never a wrapped id.
    let mut ids = Vec::new();
    let exhausted = loop {
        match c.next(req("small", 20)).await {
            Ok(got) => ids.extend(u64s(got.into_inner())),
            Err(e) => break e,
        }
        assert!(ids.len() < 1000, "the namespace does not end");
    };
    assert_eq!(ids, (2147483600..=2147483647).collect::<Vec<_>>());
    assert_eq!(exhausted.code(), Code::ResourceExhausted, "{exhausted:?}");
    assert_eq!(
        exhausted.metadata().get("idmint-error-code").unwrap(),
        "namespace_exhausted"
    );
    // The same error ends a stream, after the ids there were.
    let mut stream = c
        .next_stream(proto::NextStreamRequest {
            namespace: "small".into(),
            total: 10,
            chunk: Some(5),
        })
        .await
        .unwrap()
        .into_inner();
    let end = stream.message().await.expect_err("exhausted");
    assert_eq!(end.code(), Code::ResourceExhausted);

    // Metrics count gRPC requests by method and code.
    let text = reqwest::get(format!("http://{}/metrics", node.http))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains(r#"idmint_grpc_requests_total{method="Next",code="not_found"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"idmint_errors_total{code="wrong_kind"} 2"#),
        "{text}"
    );
    node.stop().await;
}

/// Reads a whole stream: every chunk's ids.
async fn read_stream(
    c: &mut IdmintClient<Channel>,
    ns: &str,
    total: u64,
    chunk: Option<u64>,
) -> Vec<Vec<u64>> {
    let mut stream = c
        .next_stream(proto::NextStreamRequest {
            namespace: ns.into(),
            total,
            chunk,
        })
        .await
        .unwrap()
        .into_inner();
    let mut chunks = Vec::new();
    while let Some(msg) = stream.message().await.unwrap() {
        assert_eq!(msg.namespace, ns);
        chunks.push(u64s(msg));
    }
    chunks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_ids_stream_unique_and_in_chunks_alongside_other_clients() {
    let node = GrpcNode::start(config("")).await;
    let mut c = node.client().await;
    // Other clients take ids of the same namespace meanwhile, over gRPC and HTTP.
    let others = {
        let mut c = node.client().await;
        let http = node.http;
        tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..200 {
                if i % 2 == 0 {
                    ids.extend(u64s(next(&mut c, "bulk", 7).await));
                } else {
                    let text = reqwest::get(format!("http://{http}/v1/ids/bulk?count=5"))
                        .await
                        .unwrap()
                        .text()
                        .await
                        .unwrap();
                    let body: serde_json::Value = serde_json::from_str(&text).unwrap();
                    ids.extend(
                        body["ids"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|v| v.as_str().unwrap().parse::<u64>().unwrap()),
                    );
                }
            }
            ids
        })
    };
    let chunks = read_stream(&mut c, "bulk", 1_000_000, Some(10_000)).await;
    assert!(chunks.iter().all(|c| !c.is_empty() && c.len() <= 10_000));
    let streamed: Vec<u64> = chunks.concat();
    assert_eq!(streamed.len(), 1_000_000);
    // One writer, one authority: increasing across chunks too.
    strictly_increasing(&streamed);
    let others = others.await.unwrap();
    assert_eq!(others.len(), 100 * 7 + 100 * 5);
    let mut all: HashSet<u64> = streamed.into_iter().collect();
    for id in others {
        assert!(all.insert(id), "id {id} handed out twice");
    }
    // An unset chunk means server.max_count (10,000 by default).
    let chunks = read_stream(&mut c, "bulk", 25_000, None).await;
    assert_eq!(
        chunks.iter().map(Vec::len).collect::<Vec<_>>(),
        [10_000, 10_000, 5_000]
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_the_client_stops_reading_stops_taking_ids() {
    let node = GrpcNode::start(config("")).await;
    let mut c = node.small_window_client().await;
    let mut stream = c
        .next_stream(proto::NextStreamRequest {
            namespace: "slow".into(),
            total: 10_000_000,
            chunk: Some(1000),
        })
        .await
        .unwrap()
        .into_inner();
    let first = u64s(stream.message().await.unwrap().unwrap());
    assert_eq!(first.len(), 1000);
    // The client reads nothing more: what the node served must level off far below the total
    // (a few chunks in the channel, the HTTP/2 windows' worth in flight).
    let served = || async {
        let mut c = node.client().await;
        let info = c
            .namespace(proto::NamespaceRequest {
                namespace: "slow".into(),
            })
            .await
            .unwrap()
            .into_inner();
        match info.kind {
            Some(proto::namespace_info::Kind::Sequence(s)) => s.state.unwrap().ids_served,
            other => panic!("{other:?}"),
        }
    };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut last = served().await;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = served().await;
        if now == last {
            break;
        }
        last = now;
        assert!(
            tokio::time::Instant::now() < deadline,
            "serving never levels off"
        );
    }
    assert!(
        last < 50_000,
        "{last} ids taken for a client that read 1,000"
    );
    // Reading on gets the rest, in order after the first chunk.
    let mut next_expected = first[999] + 1;
    for _ in 0..20 {
        let ids = u64s(stream.message().await.unwrap().unwrap());
        assert_eq!(ids[0], next_expected);
        next_expected = ids[ids.len() - 1] + 1;
    }
    // Going away ends the producer: the node stops promptly, nothing left in flight.
    drop(stream);
    let report = node.stop().await;
    assert!(report.given_back > 0, "{report:?}");
}

async fn block(c: &mut IdmintClient<Channel>, ns: &str, count: u64) -> proto::LeasedBlock {
    c.block(proto::BlockRequest {
        namespace: ns.into(),
        count: Some(count),
        min_start: None,
        extends: None,
    })
    .await
    .unwrap()
    .into_inner()
}

async fn give_back(
    c: &mut IdmintClient<Channel>,
    ns: &str,
    start: u64,
    b: &proto::LeasedBlock,
    lease: u64,
) -> proto::GiveBackResponse {
    c.give_back(proto::GiveBackRequest {
        namespace: ns.into(),
        start,
        end: b.end,
        step: b.step,
        lease,
    })
    .await
    .unwrap()
    .into_inner()
}

/// A rebase's floor holds on the give-back path over gRPC: a block leased before the rebase
/// cannot put its tail back below the new base (the ids would collide with imported rows), and
/// the next ids are above the base. (`supply::tests::nothing_below_a_rebase_comes_back_on_any_path`
/// pins the exact interleaving, a refill kept from committing.)
#[tokio::test]
async fn a_tail_given_back_after_a_rebase_is_never_served_below_the_base() {
    let node = GrpcNode::start(config(
        r#"
        [namespaces.imp]
        kind = "sequence"
        cache = "fixed"
        block_size = 1000
        "#,
    ))
    .await;
    let mut c = node.client().await;
    let first = next(&mut c, "imp", 6).await;
    assert_eq!(u64s(first), [1, 2, 3, 4, 5, 6]);
    // The rest of the buffered block, leased to a lower tier.
    let b = block(&mut c, "imp", 1000).await;
    assert_eq!((b.start, b.end), (7, 1001));
    let above = 20_001_001;
    let moved = c
        .rebase(proto::RebaseRequest {
            namespace: "imp".into(),
            above,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(moved.watermark, above + 1);
    let r = give_back(&mut c, "imp", b.start + 1, &b, b.lease).await;
    assert!(!r.given_back, "a tail below the rebase came back: {r:?}");
    let after = u64s(next(&mut c, "imp", 5).await);
    assert!(after.iter().all(|&id| id > above), "{after:?}");
    node.stop().await;
}

#[tokio::test]
async fn give_back_takes_only_the_newest_leases_tail_once() {
    let node = GrpcNode::start(config(
        r#"
        [namespaces.photos]
        kind = "sequence"
        cache = "fixed"
        block_size = 1000

        [namespaces.odd]
        kind = "sequence"
        step = 2
        offset = 1
        cache = "fixed"
        block_size = 1000

        [namespaces.tickets]
        kind = "sequence"
        cache = "off"
        "#,
    ))
    .await;
    let mut c = node.client().await;
    let b = block(&mut c, "photos", 100).await;
    assert_eq!((b.start, b.end, b.step), (1, 101, 1));
    assert_ne!(b.lease, 0);
    // Not the tail: wrong lease, another end, a start off the block.
    let wrong = give_back(&mut c, "photos", 50, &b, b.lease ^ 1).await;
    assert!(
        !wrong.given_back && wrong.reason.contains("lease"),
        "{wrong:?}"
    );
    let mut other_end = b;
    other_end.end = 100;
    let r = give_back(&mut c, "photos", 50, &other_end, b.lease).await;
    assert!(!r.given_back && r.reason.contains("tail"), "{r:?}");
    // The lower tier used 1..=30: 31..=100 come back, and are the next ids handed out.
    let r = give_back(&mut c, "photos", 31, &b, b.lease).await;
    assert_eq!((r.given_back, r.ids), (true, 70), "{r:?}");
    // Once only.
    let again = give_back(&mut c, "photos", 31, &b, b.lease).await;
    assert!(!again.given_back, "{again:?}");
    assert_eq!(u64s(next(&mut c, "photos", 3).await), [31, 32, 33]);

    // Ids handed out after a lease: its tail is burned, never handed out again.
    let b = block(&mut c, "photos", 10).await;
    assert_eq!((b.start, b.end), (34, 44));
    let after = u64s(next(&mut c, "photos", 1).await);
    assert_eq!(after, [44]);
    let r = give_back(&mut c, "photos", 40, &b, b.lease).await;
    assert!(
        !r.given_back && r.reason.contains("handed out after"),
        "{r:?}"
    );
    assert_eq!(u64s(next(&mut c, "photos", 1).await), [45]);

    // A later lease replaces the earlier: only its tail may come back.
    let first = block(&mut c, "photos", 10).await;
    let second = block(&mut c, "photos", 10).await;
    let r = give_back(&mut c, "photos", first.start + 5, &first, first.lease).await;
    assert!(!r.given_back, "{r:?}");
    let r = give_back(&mut c, "photos", second.start, &second, second.lease).await;
    assert!(r.given_back, "{r:?}");
    assert_eq!(u64s(next(&mut c, "photos", 1).await), [second.start]);

    // Residue classes: a step-2 tail comes back on its own ids only.
    let b = block(&mut c, "odd", 10).await;
    assert_eq!((b.start, b.step), (1, 2));
    let r = give_back(&mut c, "odd", 12, &b, b.lease).await;
    assert!(!r.given_back, "12 is not an id of the block: {r:?}");
    let r = give_back(&mut c, "odd", 11, &b, b.lease).await;
    assert_eq!((r.given_back, r.ids), (true, 5));
    assert_eq!(u64s(next(&mut c, "odd", 2).await), [11, 13]);

    // Cache off: no buffer, no lease.
    let b = block(&mut c, "tickets", 10).await;
    assert_eq!(b.lease, 0);
    let r = give_back(&mut c, "tickets", b.start + 1, &b, 0).await;
    assert!(!r.given_back && r.reason.contains("off"), "{r:?}");

    // Accounting holds: reserved = served + buffered + burned + given back.
    let info = c
        .namespace(proto::NamespaceRequest {
            namespace: "photos".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let Some(proto::namespace_info::Kind::Sequence(s)) = info.kind else {
        panic!()
    };
    let s = s.state.unwrap();
    assert_eq!(
        s.ids_reserved,
        s.ids_served + s.ids_buffered + s.ids_burned + s.ids_given_back,
        "{s:?}"
    );
    assert_eq!(s.ids_burned, 4, "the refused tail 40..=43: {s:?}");
    node.stop().await;
}

/// Lower tiers leasing blocks and handing tails back while other clients take ids: every id
/// anyone used is unique (a tail taken back is never one somebody else got), whatever
/// interleaving the two cores produce.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn give_backs_racing_other_clients_never_repeat_an_id() {
    let node = GrpcNode::start(config(
        r#"
        [namespaces.shared]
        kind = "sequence"
        cache = "fixed"
        block_size = 5000
        "#,
    ))
    .await;
    let mut tasks = Vec::new();
    for tier in 0..2u64 {
        let mut c = node.client().await;
        tasks.push(tokio::spawn(async move {
            let (mut used, mut returned) = (Vec::new(), 0u64);
            for round in 0..300u64 {
                let b = block(&mut c, "shared", 20).await;
                // Use a varying head of the block, hand the rest back.
                let keep = (round * 7 + tier) % 20;
                let tail_start = b.start + keep * b.step;
                used.extend((b.start..tail_start).step_by(b.step as usize));
                if tail_start < b.end {
                    let r = give_back(&mut c, "shared", tail_start, &b, b.lease).await;
                    returned += r.ids;
                }
            }
            (used, returned)
        }));
    }
    for _ in 0..2 {
        let mut c = node.client().await;
        tasks.push(tokio::spawn(async move {
            let mut used = Vec::new();
            for _ in 0..300 {
                used.extend(u64s(next(&mut c, "shared", 3).await));
            }
            (used, 0)
        }));
    }
    let mut all = HashSet::new();
    let mut returned = 0;
    for task in tasks {
        let (used, r) = task.await.unwrap();
        returned += r;
        for id in used {
            assert!(all.insert(id), "id {id} used twice");
        }
    }
    assert!(
        returned > 0,
        "no tail ever came back: the test checked nothing"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_streams_and_still_hands_back() {
    let node = GrpcNode::start(config("")).await;
    let mut c = node.client().await;
    let mut stream = c
        .next_stream(proto::NextStreamRequest {
            namespace: "photos".into(),
            total: 10_000_000,
            chunk: Some(1000),
        })
        .await
        .unwrap()
        .into_inner();
    stream.message().await.unwrap().unwrap();
    node.shutdown.drain();
    // The stream ends with shutting_down once the chunks already taken are read.
    let end = loop {
        match tokio::time::timeout(DEADLINE, stream.message())
            .await
            .unwrap()
        {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended as if complete"),
            Err(e) => break e,
        }
    };
    assert_eq!(end.code(), Code::Unavailable, "{end:?}");
    assert_eq!(
        end.metadata().get("idmint-error-code").unwrap(),
        "shutting_down"
    );
    let report = node.stop().await;
    assert!(report.given_back > 0, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_now_cuts_a_stream_whose_client_does_not_read() {
    let node = GrpcNode::start(config("")).await;
    let mut c = node.client().await;
    let mut stream = c
        .next_stream(proto::NextStreamRequest {
            namespace: "photos".into(),
            total: 10_000_000,
            chunk: Some(1000),
        })
        .await
        .unwrap()
        .into_inner();
    stream.message().await.unwrap().unwrap();
    // The client never reads again: draining cannot finish, stop-now must.
    node.shutdown.drain();
    node.shutdown.stop_now();
    let report = node.stop().await;
    assert!(report.given_back > 0, "{report:?}");
    drop(stream);
}

/// `server.max_connections` bounds gRPC connections too: with one allowed, a second client is
/// not served (it waits in the listen backlog) until the first goes away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_max_connections_wait_for_one_to_close() {
    let node = GrpcNode::start(config("[server]\nmax_connections = 1\n")).await;
    let mut first = node.client().await;
    assert_eq!(u64s(next(&mut first, "photos", 1).await), [1]);
    let second = tokio::spawn({
        let addr = node.grpc;
        async move {
            let channel = Endpoint::from_shared(format!("http://{addr}"))
                .unwrap()
                .connect_lazy();
            let mut c = IdmintClient::new(channel);
            next(&mut c, "photos", 1).await
        }
    });
    // Not served while the first connection is open (a negative check: a generous wait).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!second.is_finished(), "a second connection was served");
    drop(first);
    let served = tokio::time::timeout(DEADLINE, second)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(u64s(served), [2]);
    node.stop().await;
}

/// The Python `grpcio` client (tests/grpc_client.py) with stubs generated from the repository's
/// `.proto` by `grpcio-tools`: a client idmint did not write. Fails, never skips, when python3
/// or its grpc packages are missing (`python3 -m pip install grpcio grpcio-tools`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_grpcio_client_drives_the_server() {
    let node = GrpcNode::start(config(KINDS)).await;
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let proto_root = here.join("../../proto");
    let script = here.join("tests/grpc_client.py");
    let check = std::process::Command::new("python3")
        .args(["-c", "import grpc, grpc_tools"])
        .output()
        .expect("python3 must be installed for this test");
    assert!(
        check.status.success(),
        "python3 cannot import grpc and grpc_tools; install them with \
         `python3 -m pip install grpcio grpcio-tools` (scripts/test.sh does): {}",
        String::from_utf8_lossy(&check.stderr)
    );
    let addr = node.grpc.to_string();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(script)
            .arg(addr)
            .arg(proto_root)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python client failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("python grpcio client: all checks passed"),
        "{stdout}"
    );
    node.stop().await;
}

/// The standard health service (`grpc.health.v1`) answers the node's readiness, with no token
/// even under `[auth]`: `NOT_SERVING` while a declared namespace cannot be set up (its
/// authority down at start), `SERVING` once it is; an unknown service is `NOT_FOUND`; a
/// `Watch` sends the status, then the change, and a last `NOT_SERVING` when the node drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_service_answers_readiness() {
    use idmint_store::conformance::SwitchedAuthority;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    let authority = Arc::new(SwitchedAuthority::default());
    authority.set_down(true);
    // `[auth]` on: a probe carries no token, and gets its answer.
    let cfg = config(
        r#"
        [server]
        auto_create = false
        [namespaces.orders]
        kind = "sequence"
        [auth]
        [[auth.tokens]]
        hash = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
        scopes = { "*" = ["read"] }
        "#,
    );
    let node = Node::start(cfg, authority.clone()).await.unwrap();
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = grpc.local_addr().unwrap();
    let server = idmint_node::Server::new(node).grpc(grpc);
    let shutdown = server.shutdown_handle();
    let served = tokio::spawn(server.serve());
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    let check = |service: &str| HealthCheckRequest {
        service: service.into(),
    };
    let status_of =
        |r: tonic_health::pb::HealthCheckResponse| ServingStatus::try_from(r.status).unwrap();

    for service in ["", "idmint.v1.Idmint"] {
        let answer = health.check(check(service)).await.unwrap().into_inner();
        assert_eq!(status_of(answer), ServingStatus::NotServing, "{service:?}");
    }
    let unknown = health.check(check("idmint.v1.Other")).await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);

    let mut watch = health.watch(check("")).await.unwrap().into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(status_of(first), ServingStatus::NotServing);
    authority.set_down(false);
    let turned = tokio::time::timeout(DEADLINE, watch.message())
        .await
        .expect("the watch reports the change")
        .unwrap()
        .unwrap();
    assert_eq!(status_of(turned), ServingStatus::Serving);
    let answer = health.check(check("")).await.unwrap().into_inner();
    assert_eq!(status_of(answer), ServingStatus::Serving);

    shutdown.drain();
    let last = tokio::time::timeout(DEADLINE, watch.message())
        .await
        .expect("the watch ends when the node drains")
        .unwrap()
        .unwrap();
    assert_eq!(status_of(last), ServingStatus::NotServing);
    tokio::time::timeout(DEADLINE, served)
        .await
        .expect("the node stops")
        .unwrap()
        .unwrap();
}
