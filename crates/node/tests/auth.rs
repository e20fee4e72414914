//! End-to-end tests of `[auth]` (docs/api.md "Authentication"): one node serving HTTP, gRPC and
//! RESP side by side on `127.0.0.1:0` over a memory authority, with three tokens. Each
//! front-end answers exactly: no token or an unknown one → 401 / `UNAUTHENTICATED` / `NOAUTH`;
//! a token without the scope → 403 / `PERMISSION_DENIED` / `NOPERM`; over the rate → 429 with
//! `Retry-After` / `RESOURCE_EXHAUSTED` / `BUSY`; the right token → the ids. A refused request
//! creates no namespace. Also: a 32-bit namespace's block requests are capped without auth.
//!
//! The quotas run on the node's real monotonic clock, so the rates here are tiny (1 id per
//! second, bursts of 50): a refused request would need about 50 s of delay to pass instead. No
//! test sleeps; the bucket arithmetic itself is tested on an injected clock in
//! `src/auth/quota.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use idmint_node::grpc::proto;
use idmint_node::grpc::proto::idmint_client::IdmintClient;
use idmint_node::{FileConfig, Node, NodeConfig, Shutdown};
use idmint_store::MemoryAuthority;
use redis_protocol::resp2::decode::decode as decode2;
use redis_protocol::resp2::types::OwnedFrame as Frame;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::Endpoint;
use tonic::Code;

const DEADLINE: Duration = Duration::from_secs(30);

const ORDERS_TOKEN: &str = "idmint_orders_secret";
const READER_TOKEN: &str = "idmint_reader_secret";
const BLOCKS_TOKEN: &str = "idmint_blocks_secret";
const ADMIN_TOKEN: &str = "idmint_admin_secret";

fn hash(token: &str) -> String {
    idmint_node::auth::TokenHash::of(token.as_bytes()).to_string()
}

/// `orders` may take ids from and read `orders.*` (at most 50 per request, 1 per second,
/// bursts of 50); `reader` may read everything; `blocks` may take blocks of anything.
fn config() -> NodeConfig {
    let toml = format!(
        r#"
        [auth]
        metrics = "open"

        [[auth.tokens]]
        name = "orders"
        hash = "{}"
        scopes = {{ "orders.*" = ["ids", "read"] }}
        max_count = 50
        rate = 1
        burst = 50

        [[auth.tokens]]
        name = "reader"
        hash = "{}"
        scopes = {{ "*" = ["read"] }}

        [[auth.tokens]]
        hash = "{}"
        scopes = {{ "*" = ["blocks"] }}

        [[auth.tokens]]
        name = "admin"
        hash = "{}"
        scopes = {{ "orders.*" = ["admin", "ids"] }}
        "#,
        hash(ORDERS_TOKEN),
        hash(READER_TOKEN),
        hash(BLOCKS_TOKEN),
        hash(ADMIN_TOKEN)
    );
    FileConfig::parse(&toml).unwrap().node
}

/// A node serving HTTP, gRPC and RESP.
struct AuthNode {
    http: String,
    grpc: SocketAddr,
    resp: SocketAddr,
    client: reqwest::Client,
    shutdown: Shutdown,
    served: tokio::task::JoinHandle<Result<idmint_node::ShutdownReport, idmint_node::NodeError>>,
}

impl AuthNode {
    async fn start(config: NodeConfig) -> AuthNode {
        let node = Node::start(config, Arc::new(MemoryAuthority::new()))
            .await
            .unwrap();
        let bind = || TcpListener::bind("127.0.0.1:0");
        let (http, grpc, resp) = (
            bind().await.unwrap(),
            bind().await.unwrap(),
            bind().await.unwrap(),
        );
        let addrs = (
            http.local_addr().unwrap(),
            grpc.local_addr().unwrap(),
            resp.local_addr().unwrap(),
        );
        let server = idmint_node::Server::new(node)
            .http(http)
            .grpc(grpc)
            .resp(resp);
        let shutdown = server.shutdown_handle();
        let served = tokio::spawn(server.serve());
        AuthNode {
            http: format!("http://{}", addrs.0),
            grpc: addrs.1,
            resp: addrs.2,
            client: reqwest::Client::builder()
                .timeout(DEADLINE)
                .build()
                .unwrap(),
            shutdown,
            served,
        }
    }

    /// `method path` with `token` as bearer (if any): status, headers, JSON body (or Null).
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        let mut request = self.client.request(method, format!("{}{path}", self.http));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let answer = request.send().await.unwrap();
        let status = answer.status().as_u16();
        let headers = answer.headers().clone();
        let text = answer.text().await.unwrap();
        (
            status,
            headers,
            serde_json::from_str(&text).unwrap_or(Value::Null),
        )
    }

    async fn get(&self, path: &str, token: Option<&str>) -> (u16, Value) {
        let (status, _, body) = self.call(reqwest::Method::GET, path, token).await;
        (status, body)
    }

    async fn stop(self) {
        self.shutdown.drain();
        tokio::time::timeout(DEADLINE, self.served)
            .await
            .expect("the node stops")
            .unwrap()
            .unwrap();
    }
}

/// Rebase and retire need the `admin` scope on the namespace: every other token is refused
/// before anything moves; the admin token moves the watermark of `orders.*` only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebase_and_retire_need_the_admin_scope() {
    let node = AuthNode::start(config()).await;
    let post = reqwest::Method::POST;
    let rebase = "/v1/admin/rebase/orders.eu?above=5000";
    let (status, _, body) = node.call(post.clone(), rebase, None).await;
    assert_eq!((status, code(&body)), (401, "unauthorized"), "{body}");
    for token in [ORDERS_TOKEN, READER_TOKEN, BLOCKS_TOKEN] {
        let (status, _, body) = node.call(post.clone(), rebase, Some(token)).await;
        assert_eq!((status, code(&body)), (403, "forbidden"), "{token}: {body}");
        let (status, _, body) = node
            .call(post.clone(), "/v1/admin/retire/orders.eu", Some(token))
            .await;
        assert_eq!((status, code(&body)), (403, "forbidden"), "{token}: {body}");
    }
    // Nothing moved: the first id is still 1.
    let (status, body) = node.get("/v1/ids/orders.eu", Some(ORDERS_TOKEN)).await;
    assert_eq!(
        (status, body["ids"][0].as_str()),
        (200, Some("1")),
        "{body}"
    );

    let (status, _, body) = node.call(post.clone(), rebase, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["watermark"], "5001", "{body}");
    assert_eq!(body["action"], "rebase", "{body}");
    let (status, body) = node.get("/v1/ids/orders.eu", Some(ADMIN_TOKEN)).await;
    assert_eq!(
        (status, body["ids"][0].as_str()),
        (200, Some("5001")),
        "{body}"
    );
    // Outside the token's pattern: 403.
    let (status, _, body) = node
        .call(post.clone(), "/v1/admin/retire/users", Some(ADMIN_TOKEN))
        .await;
    assert_eq!((status, code(&body)), (403, "forbidden"), "{body}");
    let (status, _, body) = node
        .call(
            post.clone(),
            "/v1/admin/retire/orders.eu",
            Some(ADMIN_TOKEN),
        )
        .await;
    assert_eq!(
        (status, body["retired"].as_bool()),
        (200, Some(true)),
        "{body}"
    );
    let (status, body) = node.get("/v1/ids/orders.eu", Some(ADMIN_TOKEN)).await;
    assert_eq!((status, code(&body)), (410, "namespace_retired"), "{body}");
    node.stop().await;
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("(no code)")
}

/// The names the listing shows to `token`.
async fn listed(node: &AuthNode, token: &str) -> Vec<String> {
    let (status, body) = node.get("/v1/namespaces", Some(token)).await;
    assert_eq!(status, 200, "{body}");
    body["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ns| ns["namespace"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_answers_401_403_429_and_200_as_the_token_allows() {
    let node = AuthNode::start(config()).await;

    // No token, a malformed header, an unknown token: 401 with the JSON body and the scheme.
    let (status, headers, body) = node
        .call(reqwest::Method::GET, "/v1/ids/orders.eu", None)
        .await;
    assert_eq!((status, code(&body)), (401, "unauthorized"), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Bearer"),
        "{body}"
    );
    assert_eq!(headers["www-authenticate"], "Bearer realm=\"idmint\"");
    let (status, body) = node.get("/v1/ids/orders.eu", Some("idmint_wrong")).await;
    assert_eq!((status, code(&body)), (401, "unauthorized"), "{body}");
    let answer = node
        .client
        .get(format!("{}/v1/ids/orders.eu", node.http))
        .header("authorization", format!("Basic {ORDERS_TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 401);

    // A known token without the scope: 403, and nothing is created.
    let (status, body) = node.get("/v1/ids/users", Some(ORDERS_TOKEN)).await;
    assert_eq!((status, code(&body)), (403, "forbidden"), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ids scope"),
        "{body}"
    );
    let (status, body) = node.get("/v1/ids/orders.eu", Some(READER_TOKEN)).await;
    assert_eq!((status, code(&body)), (403, "forbidden"), "{body}");
    let (status, _, body) = node
        .call(
            reqwest::Method::POST,
            "/v1/blocks/orders.eu?count=10",
            Some(ORDERS_TOKEN),
        )
        .await;
    assert_eq!((status, code(&body)), (403, "forbidden"), "{body}");
    assert!(listed(&node, READER_TOKEN).await.is_empty());

    // The right token: ids; above its max_count: 400 like server.max_count.
    let (status, body) = node
        .get("/v1/ids/orders.eu?count=10", Some(ORDERS_TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ids"].as_array().unwrap().len(), 10);
    let (status, body) = node
        .get("/v1/ids/orders.eu?count=51", Some(ORDERS_TOKEN))
        .await;
    assert_eq!((status, code(&body)), (400, "invalid_count"), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_count"),
        "{body}"
    );

    // Bursts of 50 at 1 per second: 10 + 40 pass, the next 50 waits about 50 s: 429.
    let (status, body) = node
        .get("/v1/ids/orders.eu?count=40", Some(ORDERS_TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, headers, body) = node
        .call(
            reqwest::Method::GET,
            "/v1/ids/orders.eu?count=50",
            Some(ORDERS_TOKEN),
        )
        .await;
    assert_eq!((status, code(&body)), (429, "rate_limited"), "{body}");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1, "{retry}");
    // The quota is per namespace: another one of the token's passes.
    let (status, body) = node
        .get("/v1/ids/orders.us?count=50", Some(ORDERS_TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");

    // Blocks need the blocks scope; reads need read, and the listing shows what the token may
    // read.
    let (status, _, body) = node
        .call(
            reqwest::Method::POST,
            "/v1/blocks/photos?count=10",
            Some(BLOCKS_TOKEN),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = node.get("/v1/namespaces/photos", Some(ORDERS_TOKEN)).await;
    assert_eq!((status, code(&body)), (403, "forbidden"), "{body}");
    let (status, body) = node.get("/v1/namespaces/photos", Some(READER_TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    let mut all = listed(&node, READER_TOKEN).await;
    all.sort();
    assert_eq!(all, ["orders.eu", "orders.us", "photos"]);
    let mut own = listed(&node, ORDERS_TOKEN).await;
    own.sort();
    assert_eq!(own, ["orders.eu", "orders.us"]);
    let (status, body) = node.get("/v1/namespaces", None).await;
    assert_eq!((status, code(&body)), (401, "unauthorized"), "{body}");
    let (status, body) = node.get("/v1/decode/orders.eu/1", Some(BLOCKS_TOKEN)).await;
    assert_eq!((status, code(&body)), (403, "forbidden"), "{body}");

    // The status page needs read on *; health, readiness, the document and (metrics = "open")
    // the metrics stay open.
    assert_eq!(node.get("/", None).await.0, 401);
    assert_eq!(node.get("/", Some(ORDERS_TOKEN)).await.0, 403);
    assert_eq!(node.get("/", Some(READER_TOKEN)).await.0, 200);
    for open in ["/healthz", "/readyz", "/openapi.json"] {
        assert_eq!(node.get(open, None).await.0, 200, "{open}");
    }
    let (status, _, _) = node.call(reqwest::Method::GET, "/metrics", None).await;
    assert_eq!(status, 200);
    let metrics = node
        .client
        .get(format!("{}/metrics", node.http))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let blocks_label = &hash(BLOCKS_TOKEN)["sha256:".len().."sha256:".len() + 12];
    for line in [
        "idmint_auth_ids_total{token=\"orders\"} 100".to_owned(),
        format!("idmint_auth_ids_total{{token=\"{blocks_label}\"}} 10"),
        "idmint_auth_refused_total{token=\"orders\",reason=\"rate_limited\"} 1".to_owned(),
        "idmint_auth_refused_total{token=\"orders\",reason=\"max_count\"} 1".to_owned(),
        "idmint_auth_refused_total{token=\"unknown\",reason=\"unauthorized\"} 1".to_owned(),
        "idmint_errors_total{code=\"forbidden\"}".to_owned(),
    ] {
        assert!(metrics.contains(&line), "no {line} in\n{metrics}");
    }
    assert!(!metrics.contains(ORDERS_TOKEN));
    // The per-token series are valid exposition (tests/metrics.rs checks the rest).
    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian: prometheus; scripts/test.sh installs it)");
    use std::io::Write as _;
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(metrics.as_bytes())
        .unwrap();
    let checked = promtool.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    node.stop().await;
}

/// `[auth] metrics = "read"`: `/metrics` needs a token with read on `*`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_may_need_a_token() {
    let toml = format!(
        "[auth]\nmetrics = \"read\"\n[[auth.tokens]]\nhash = \"{}\"\nscopes = {{ \"*\" = [\"read\"] }}\n",
        hash(READER_TOKEN)
    );
    let node = AuthNode::start(FileConfig::parse(&toml).unwrap().node).await;
    assert_eq!(node.get("/metrics", None).await.0, 401);
    let (status, _, _) = node
        .call(reqwest::Method::GET, "/metrics", Some(READER_TOKEN))
        .await;
    assert_eq!(status, 200);
    assert_eq!(node.get("/healthz", None).await.0, 200);
    node.stop().await;
}

/// gRPC reads `authorization: Bearer <token>` from the metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_takes_the_token_from_metadata() {
    let node = AuthNode::start(config()).await;
    let channel = Endpoint::from_shared(format!("http://{}", node.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = IdmintClient::new(channel);
    let next = |ns: &str, count: u64, token: Option<&str>| {
        let mut request = tonic::Request::new(proto::NextRequest {
            namespace: ns.into(),
            count: Some(count),
            shard: None,
            key: None,
        });
        if let Some(token) = token {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        request
    };
    let refused = |result: Result<tonic::Response<proto::Ids>, tonic::Status>| {
        let status = result.expect_err("refused");
        let idmint = status
            .metadata()
            .get("idmint-error-code")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        (status.code(), idmint)
    };
    assert_eq!(
        refused(client.next(next("orders.eu", 1, None)).await),
        (Code::Unauthenticated, "unauthorized".into())
    );
    assert_eq!(
        refused(
            client
                .next(next("orders.eu", 1, Some("idmint_wrong")))
                .await
        ),
        (Code::Unauthenticated, "unauthorized".into())
    );
    assert_eq!(
        refused(client.next(next("users", 1, Some(ORDERS_TOKEN))).await),
        (Code::PermissionDenied, "forbidden".into())
    );
    let ids = client
        .next(next("orders.eu", 50, Some(ORDERS_TOKEN)))
        .await
        .unwrap()
        .into_inner();
    match ids.ids {
        Some(proto::ids::Ids::U64(v)) => assert_eq!(v.ids.len(), 50),
        other => panic!("not 64-bit ids: {other:?}"),
    }
    assert_eq!(
        refused(client.next(next("orders.eu", 50, Some(ORDERS_TOKEN))).await),
        (Code::ResourceExhausted, "rate_limited".into())
    );
    // Reads need read: the listing without a token is refused, with reader it shows all.
    let status = client
        .namespaces(proto::NamespacesRequest {})
        .await
        .expect_err("no token");
    assert_eq!(status.code(), Code::Unauthenticated);
    let mut request = tonic::Request::new(proto::NamespacesRequest {});
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {READER_TOKEN}").parse().unwrap(),
    );
    let list = client.namespaces(request).await.unwrap().into_inner();
    assert_eq!(list.namespaces.len(), 1);
    node.stop().await;
}

/// A RESP request of `words`.
fn request(words: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for w in words {
        out.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
    }
    out
}

/// Sends each request on one connection and reads one reply to each.
async fn resp_session(addr: SocketAddr, requests: &[&[&str]]) -> Vec<Frame> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut replies = Vec::new();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    for words in requests {
        stream.write_all(&request(words)).await.unwrap();
        tokio::time::timeout(DEADLINE, async {
            loop {
                if let Some((frame, used)) = decode2(&buf).unwrap() {
                    replies.push(frame);
                    buf.drain(..used);
                    return;
                }
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "the server closed the connection");
                buf.extend_from_slice(&chunk[..n]);
            }
        })
        .await
        .expect("a reply in time");
    }
    replies
}

fn error_line(frame: &Frame) -> String {
    match frame {
        Frame::Error(e) => e.clone(),
        other => panic!("not an error: {other:?}"),
    }
}

/// RESP: `NOAUTH` before `AUTH`, `WRONGPASS` for an unknown token, then the token's scopes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_needs_auth_then_checks_scopes() {
    let node = AuthNode::start(config()).await;
    let replies = resp_session(
        node.resp,
        &[
            &["PING"],
            &["INCR", "orders.eu"],
            &["AUTH", "idmint_wrong"],
            &["INCR", "orders.eu"],
            &["AUTH", ORDERS_TOKEN],
            &["INCR", "orders.eu"],
            &["INCR", "users"],
            &["IDMINT.BLOCK", "orders.eu", "10"],
            &["IDMINT.NEXT", "orders.eu", "49"],
            &["IDMINT.NEXT", "orders.eu", "50"],
        ],
    )
    .await;
    assert_eq!(replies[0], Frame::SimpleString(b"PONG".to_vec()));
    assert!(
        error_line(&replies[1]).starts_with("NOAUTH "),
        "{:?}",
        replies[1]
    );
    assert!(
        error_line(&replies[2]).starts_with("WRONGPASS "),
        "{:?}",
        replies[2]
    );
    assert!(
        error_line(&replies[3]).starts_with("NOAUTH "),
        "{:?}",
        replies[3]
    );
    assert_eq!(replies[4], Frame::SimpleString(b"OK".to_vec()));
    assert_eq!(replies[5], Frame::Integer(1));
    assert!(
        error_line(&replies[6]).starts_with("NOPERM "),
        "{:?}",
        replies[6]
    );
    assert!(
        error_line(&replies[7]).starts_with("NOPERM "),
        "{:?}",
        replies[7]
    );
    assert!(
        matches!(&replies[8], Frame::Array(ids) if ids.len() == 49),
        "{:?}",
        replies[8]
    );
    assert!(
        error_line(&replies[9]).starts_with("BUSY "),
        "{:?}",
        replies[9]
    );

    // HELLO 3 AUTH user token authenticates too.
    let replies = resp_session(
        node.resp,
        &[
            &["HELLO", "2", "AUTH", "default", READER_TOKEN],
            &["IDMINT.DECODE", "orders.eu", "1"],
        ],
    )
    .await;
    assert!(matches!(replies[0], Frame::Array(_)), "{:?}", replies[0]);
    assert!(!matches!(replies[1], Frame::Error(_)), "{:?}", replies[1]);
    node.stop().await;
}

/// redis-py, a client idmint did not write, authenticates with `password=` (RESP2 `AUTH`,
/// RESP3 `HELLO 3 AUTH`) and maps the refusals to its own exceptions: see resp_client.py.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_authenticates_with_its_password() {
    let node = AuthNode::start(config()).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/resp_client.py");
    let port = node.resp.port().to_string();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args([script, &port, ORDERS_TOKEN])
            .output()
            .expect("python3 with the redis module (scripts/test.sh installs it)")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("checks passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    node.stop().await;
}

/// Python's grpcio, a client idmint did not write, sends the token as metadata: see
/// grpc_client.py.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_grpcio_sends_the_token_as_metadata() {
    let node = AuthNode::start(config()).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/grpc_client.py");
    let proto_root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../proto");
    let addr = node.grpc.to_string();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args([script, &addr, proto_root, ORDERS_TOKEN])
            .output()
            .expect("python3 with grpcio and grpcio-tools (scripts/test.sh installs them)")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    node.stop().await;
}

/// Without `[auth]`, RESP `AUTH` is an error (as Redis without a password) and the rest works;
/// and a 32-bit namespace's block requests get at most 1/100,000 of its space, however much
/// `server.max_block_request` allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_auth_everything_is_open_and_32_bit_blocks_are_capped() {
    let config = FileConfig::parse(
        "[namespaces.small]\nkind = \"sequence\"\nwidth = 32\n\n[server]\nmax_block_request = 1000000\n",
    )
    .unwrap()
    .node;
    let node = AuthNode::start(config).await;
    let (status, _, body) = node
        .call(
            reqwest::Method::POST,
            "/v1/blocks/small?count=1000000",
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let number = |v: &Value| {
        v.as_u64()
            .unwrap_or_else(|| v.as_str().unwrap().parse().unwrap())
    };
    let (start, end) = (number(&body["start"]), number(&body["end"]));
    let cap = u64::from(u32::MAX) / 100_000;
    assert!(end - start <= cap && end > start, "{body}");
    let replies = resp_session(
        node.resp,
        &[
            &["AUTH", "x"],
            &["INCR", "photos"],
            &["IDMINT.BLOCK", "small", "1000000"],
        ],
    )
    .await;
    assert!(
        error_line(&replies[0]).starts_with("ERR "),
        "{:?}",
        replies[0]
    );
    assert_eq!(replies[1], Frame::Integer(1));
    match &replies[2] {
        Frame::Array(parts) => {
            let n = |f: &Frame| match f {
                Frame::Integer(i) => *i as u64,
                Frame::BulkString(b) => String::from_utf8_lossy(b).parse().unwrap(),
                other => panic!("{other:?}"),
            };
            // RESP2 writes the map as [start, s, end, e, step, 1].
            assert!(n(&parts[3]) - n(&parts[1]) <= cap, "{parts:?}");
        }
        other => panic!("{other:?}"),
    }
    node.stop().await;
}

/// A token's `max_block_32` raises the 32-bit block cap for it alone (a regional tier's token):
/// its block request gets up to that many ids, another token's the default 1/100,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokens_max_block_32_raises_the_cap_for_it_alone() {
    let config = FileConfig::parse(&format!(
        "[namespaces.small]\nkind = \"sequence\"\nwidth = 32\ncache = \"fixed\"\nblock_size = 500000\n\n\
         [server]\nmax_block_request = 1000000\n\n\
         [[auth.tokens]]\nname = \"regional\"\nhash = \"{}\"\nscopes = {{ \"*\" = [\"blocks\"] }}\nmax_block_32 = 200000\n\n\
         [[auth.tokens]]\nname = \"app\"\nhash = \"{}\"\nscopes = {{ \"*\" = [\"blocks\"] }}\n",
        hash(ADMIN_TOKEN),
        hash(BLOCKS_TOKEN)
    ))
    .unwrap()
    .node;
    let node = AuthNode::start(config).await;
    let number = |v: &Value| {
        v.as_u64()
            .unwrap_or_else(|| v.as_str().unwrap().parse().unwrap())
    };
    let mut sizes = Vec::new();
    for token in [ADMIN_TOKEN, BLOCKS_TOKEN] {
        let (status, _, body) = node
            .call(
                reqwest::Method::POST,
                "/v1/blocks/small?count=1000000",
                Some(token),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        sizes.push(number(&body["end"]) - number(&body["start"]));
    }
    let default_cap = u64::from(u32::MAX) / 2 / 100_000;
    assert!(
        sizes[0] > default_cap && sizes[0] <= 200_000,
        "the regional token's block: {sizes:?}"
    );
    assert!(sizes[1] <= default_cap, "another token's block: {sizes:?}");
    node.stop().await;
}

/// The status page behind `[auth]` in a browser's terms: a browser without a token is sent to
/// the sign-in form, an API client gets the JSON 401; a refused token sets no cookie and goes
/// back to the form; a `read` token on `*` is kept in an HttpOnly, SameSite=Strict cookie
/// (not Secure on plain HTTP) that opens the page, and only the page: with the cookie alone an
/// id request is still 401. `POST /logout` clears it. (Chromium runs the same steps in
/// status_page/run.sh.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_signs_a_browser_in_with_a_cookie() {
    let node = AuthNode::start(config()).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(DEADLINE)
        .build()
        .unwrap();
    let browser = |path: &str| {
        client
            .get(format!("{}{path}", node.http))
            .header("accept", "text/html,application/xhtml+xml")
    };
    let got = browser("/").send().await.unwrap();
    assert_eq!(got.status(), 303);
    assert_eq!(got.headers()["location"], "/login");
    let got = client.get(format!("{}/", node.http)).send().await.unwrap();
    assert_eq!(got.status(), 401);
    let body: Value = serde_json::from_str(&got.text().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    let form = browser("/login").send().await.unwrap();
    assert_eq!(form.status(), 200);
    assert!(form.text().await.unwrap().contains("name=\"token\""));

    // What a browser sends for the form (the tokens here need no escaping).
    let sign_in = |token: &str| {
        client
            .post(format!("{}/login", node.http))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
    };
    for refused in ["idmint_nobody", ORDERS_TOKEN] {
        let got = sign_in(refused).await.unwrap();
        assert_eq!(got.status(), 303, "{refused}");
        assert_eq!(got.headers()["location"], "/login?refused", "{refused}");
        assert!(got.headers().get("set-cookie").is_none(), "{refused}");
    }
    let page = browser("/login?refused").send().await.unwrap();
    assert!(page.text().await.unwrap().contains("id=\"refused\""));
    let got = client
        .post(format!("{}/login", node.http))
        .header("content-type", "application/json")
        .body("{\"token\": \"x\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 400);

    let got = sign_in(READER_TOKEN).await.unwrap();
    assert_eq!(got.status(), 303);
    assert_eq!(got.headers()["location"], "/");
    let cookie = got.headers()["set-cookie"].to_str().unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age="] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    let pair = cookie.split(';').next().unwrap().to_owned();
    let page = browser("/").header("cookie", &pair).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("idmint status"));
    // The cookie opens the page only.
    let got = client
        .get(format!("{}/v1/ids/orders.a", node.http))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 401);

    let got = client
        .post(format!("{}/logout", node.http))
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 303);
    assert_eq!(got.headers()["location"], "/login");
    assert!(got.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));
    node.stop().await;
}
