//! The doors of a node, as its clients see them: one small transport trait ([`Door`]) over a
//! node served by `idmint_node::Server` with HTTP, gRPC and RESP listeners side by side (all
//! plain or all over TLS), and one implementation per protocol, each through a real client:
//! reqwest for plain HTTP and hyper's client over tokio-rustls for HTTPS ([`http`]), tonic's
//! generated client ([`grpc`]), a minimal RESP client over a TCP or TLS stream ([`resp`]).
//! [`raw`] holds what the properties send on the raw socket (nothing at all, one request, bad
//! input) and the certificates' client side.
//!
//! Every operation answers the value or a [`Failure`]: the idmint error codes the answer stands
//! for (HTTP: the JSON body's `error.code`; gRPC: the `idmint-error-code` metadata; RESP: the
//! error line's first word mapped back by [`resp::codes_of`], where `ERR` stands for every
//! `invalid_*` code), or no answer at all (the connection failed or closed).
//!
//! A [`Fixture`] is one node on a memory authority (or one given), with its shutdown handle
//! and its served future; every door of a fixture talks to the same node.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod gate;
pub mod grpc;
pub mod http;
pub mod raw;
pub mod resp;

use async_trait::async_trait;
use idmint_api::ErrorCode;
use idmint_node::server::Protocol;
use idmint_node::tls::ServerTls;
use idmint_node::{Authority, FileConfig, Node, NodeError, Server, Shutdown, ShutdownReport};
use idmint_store::MemoryAuthority;
use idmint_testkit::certs::TestCerts;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How long anything awaited may take on a loaded 2-core machine before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Plain text or TLS on every listener of a fixture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    /// No TLS.
    Plain,
    /// TLS with a certificate signed by a CA made for the test.
    Tls,
}

/// Why an operation has no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The node answered an error: the idmint codes the answer stands for (one, except where
    /// a protocol folds several into one word) and its message.
    Refused {
        /// The codes.
        codes: Vec<ErrorCode>,
        /// The message, for failure output.
        message: String,
    },
    /// No answer: the connection failed, or closed before the answer was whole.
    NoAnswer(String),
}

/// An operation's outcome.
pub type Answer<T> = Result<T, Failure>;

/// A block leased through a door.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// First id.
    pub start: u64,
    /// One step past the last id.
    pub end: u64,
    /// Distance between ids.
    pub step: u64,
    /// What gives its tail back.
    pub lease: u64,
}

impl Lease {
    /// How many ids it holds.
    pub fn ids(&self) -> u64 {
        (self.end - self.start).div_ceil(self.step)
    }
}

/// What became of a tail given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GivenBack {
    /// Whether the ids went back in front of the buffer.
    pub given_back: bool,
    /// How many.
    pub ids: u64,
}

/// A sequence id decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// The id.
    pub id: u64,
    /// Whether it is of the namespace's class and range.
    pub in_namespace: bool,
    /// Whether it may have been handed out.
    pub issued: bool,
    /// Its residue class, `id % step`.
    pub residue: u64,
}

/// The shard a request for ids names, as a client sends it: `shard`, `key`, neither or both
/// (the doors send what they are given; the node judges).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Route {
    /// `shard`.
    pub shard: Option<u64>,
    /// `key`.
    pub key: Option<u64>,
}

/// Where a door connects, and as whom.
#[derive(Clone)]
pub struct Target {
    /// The listener's address.
    pub addr: SocketAddr,
    /// With TLS: the client configuration trusting the test CA, with the protocol's ALPN.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// With TLS: the CA certificate (PEM), for tonic.
    pub ca_pem: Option<String>,
    /// The bearer token sent (RESP: `AUTH` on each connection first).
    pub token: Option<String>,
}

/// One front-end of a node, as a client uses it. Each property of the suite is written once
/// against this trait and run for every door (`conformance_tests!` in `front_ends.rs`).
#[async_trait]
pub trait Door: Clone + Send + Sync + 'static {
    /// Which listener of the fixture it talks to.
    const PROTOCOL: Protocol;

    /// A door to `target`.
    fn open(target: Target) -> Self;

    /// Where it connects.
    fn target(&self) -> &Target;

    /// The same door sending `token` (none: anonymous).
    fn with_token(&self, token: Option<&str>) -> Self {
        let mut target = self.target().clone();
        target.token = token.map(str::to_owned);
        Self::open(target)
    }

    /// `count` ids of `ns` (absent: the protocol's default request, one id).
    async fn ids(&self, ns: &str, count: Option<u64>) -> Answer<Vec<u64>> {
        self.ids_routed(ns, count, Route::default()).await
    }

    /// [`Door::ids`] naming a shard: `route`'s `shard` and `key` sent as this protocol sends
    /// them (both when both are given), 64-bit ids.
    async fn ids_routed(&self, ns: &str, count: Option<u64>, route: Route) -> Answer<Vec<u64>>;

    /// A block of up to `count` ids of `ns`, leased.
    async fn block(&self, ns: &str, count: u64) -> Answer<Lease>;

    /// Gives `[start, end)` with `step`, the tail of the block leased as `lease`, back.
    async fn give_back(
        &self,
        ns: &str,
        lease: u64,
        start: u64,
        end: u64,
        step: u64,
    ) -> Answer<GivenBack>;

    /// What the sequence id `id` of `ns` says about itself.
    async fn decode(&self, ns: &str, id: &str) -> Answer<Decoded>;

    /// The settings of `ns`: its name as the node reports it. `None`: the protocol has no
    /// such read (RESP).
    async fn info(&self, ns: &str) -> Option<Answer<String>>;

    /// Writes one small complete request on `conn` (a raw socket of this door, TLS done) and
    /// reads its whole answer, leaving the connection open.
    async fn one_request(&self, conn: &mut raw::Conn);

    /// Sends bad and oversized input on raw sockets of this door and checks that each is
    /// refused as this protocol refuses it, closing only its own connection.
    async fn bad_input(&self);
}

/// Fails unless `answer` is a refusal that stands for `code`.
#[track_caller]
pub fn assert_refused<T: std::fmt::Debug>(answer: Answer<T>, code: ErrorCode) {
    match answer {
        Err(Failure::Refused { codes, message }) => assert!(
            codes.contains(&code),
            "expected {code:?}, got {codes:?}: {message}"
        ),
        other => panic!("expected a refusal with {code:?}, got {other:?}"),
    }
}

/// The value of `answer`, failing with the refusal otherwise.
#[track_caller]
pub fn ok<T>(answer: Answer<T>) -> T {
    match answer {
        Ok(value) => value,
        Err(e) => panic!("expected an answer, got {e:?}"),
    }
}

/// One node served with its HTTP, gRPC and RESP listeners, plain or over TLS.
pub struct Fixture {
    /// The node.
    pub node: Arc<Node>,
    /// Its authority.
    pub authority: Arc<dyn Authority>,
    /// Its shutdown stages.
    pub shutdown: Shutdown,
    /// Plain or TLS.
    pub security: Security,
    addrs: [(Protocol, SocketAddr); 3],
    certs: Option<TestCerts>,
    served: Option<JoinHandle<Result<ShutdownReport, NodeError>>>,
}

impl Fixture {
    /// The node of `toml` on a memory authority.
    pub async fn start(toml: &str, security: Security) -> Fixture {
        Fixture::start_on(toml, security, Arc::new(MemoryAuthority::new())).await
    }

    /// The node of `toml` on `authority`.
    pub async fn start_on(
        toml: &str,
        security: Security,
        authority: Arc<dyn Authority>,
    ) -> Fixture {
        let config = FileConfig::parse(toml)
            .unwrap_or_else(|e| panic!("{e}\n{toml}"))
            .node;
        let node = Node::start(config, authority.clone()).await.unwrap();
        let certs = (security == Security::Tls).then(TestCerts::new);
        let tls = certs
            .as_ref()
            .map(|c| ServerTls::load(&c.cert_file(), &c.key_file()).unwrap());
        let mut server = Server::new(node.clone()).tls(tls);
        let mut addrs = Vec::new();
        for protocol in [Protocol::Http, Protocol::Grpc, Protocol::Resp] {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.push((protocol, listener.local_addr().unwrap()));
            server = server.listen(protocol, listener);
        }
        let shutdown = server.shutdown_handle();
        let served = tokio::spawn(server.serve());
        Fixture {
            node,
            authority,
            shutdown,
            security,
            addrs: [addrs[0], addrs[1], addrs[2]],
            certs,
            served: Some(served),
        }
    }

    /// Where the `protocol` listener is, and how to reach it.
    pub fn target(&self, protocol: Protocol) -> Target {
        let addr = self
            .addrs
            .iter()
            .find(|(p, _)| *p == protocol)
            .map(|(_, a)| *a)
            .unwrap();
        Target {
            addr,
            tls: self
                .certs
                .as_ref()
                .map(|c| raw::client_tls(&c.ca_pem, protocol)),
            ca_pem: self.certs.as_ref().map(|c| c.ca_pem.clone()),
            token: None,
        }
    }

    /// The anonymous door `D` of this node.
    pub fn door<D: Door>(&self) -> D {
        D::open(self.target(D::PROTOCOL))
    }

    /// Every door of the node still answers: one id of `ns` through each.
    pub async fn every_door_answers(&self, ns: &str) {
        let mut seen = Vec::new();
        seen.extend(ok(self.door::<http::Http>().ids(ns, Some(2)).await));
        seen.extend(ok(self.door::<grpc::Grpc>().ids(ns, Some(2)).await));
        seen.extend(ok(self.door::<resp::Resp>().ids(ns, Some(2)).await));
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "ids through the three doors in turn must increase: {seen:?}"
        );
    }

    /// Drains the node and waits for `Server::serve` to return its hand-back report.
    pub async fn stop(mut self) -> ShutdownReport {
        self.shutdown.drain();
        self.served().await
    }

    /// Waits for `Server::serve` to return (the drain began elsewhere).
    pub async fn served(&mut self) -> ShutdownReport {
        let handle = self.served.take().expect("served once");
        tokio::time::timeout(DEADLINE, handle)
            .await
            .expect("the node did not stop in time")
            .unwrap()
            .unwrap()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(handle) = self.served.take() {
            handle.abort();
        }
    }
}

/// The SHA-256 of `token`, as `[[auth.tokens]] hash` wants it.
pub fn hash(token: &str) -> String {
    idmint_node::auth::TokenHash::of(token.as_bytes()).to_string()
}

/// Polls `cond` until it holds, failing after [`DEADLINE`].
pub async fn poll_until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if cond().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The code of an idmint error code's text (`invalid_count`), [`ErrorCode::Unknown`] for
/// text no code has.
pub fn code_of(text: &str) -> ErrorCode {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).unwrap_or(ErrorCode::Unknown)
}
