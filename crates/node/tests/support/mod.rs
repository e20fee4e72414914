//! What the node's integration tests share: a node served in process by `idmint_node::Server`
//! on its own port, an HTTP client for it, and polling with a deadline (no test sleeps to order
//! events).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use idmint_node::{Authority, Node, NodeConfig, NodeError, Server, Shutdown, ShutdownReport};
use serde_json::Value;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How long any polled condition may take on a loaded 2-core machine before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A node served in process on its own port; aborted if dropped without [`TestNode::stop`].
pub struct TestNode {
    /// `http://ADDR` of the node.
    pub base: String,
    /// A client with the deadline as timeout.
    pub client: reqwest::Client,
    shutdown: Shutdown,
    handle: Option<JoinHandle<Result<ShutdownReport, NodeError>>>,
}

impl TestNode {
    /// Serves `config` from `authority` on a fresh port and waits until `/healthz` answers.
    pub async fn start(config: NodeConfig, authority: Arc<dyn Authority>) -> TestNode {
        Self::serve(config, authority, None).await
    }

    /// [`TestNode::start`], and gRPC on a fresh port too: the node and the gRPC address.
    pub async fn start_with_grpc(
        config: NodeConfig,
        authority: Arc<dyn Authority>,
    ) -> (TestNode, SocketAddr) {
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = grpc.local_addr().unwrap();
        (Self::serve(config, authority, Some(grpc)).await, addr)
    }

    async fn serve(
        config: NodeConfig,
        authority: Arc<dyn Authority>,
        grpc: Option<tokio::net::TcpListener>,
    ) -> TestNode {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let node = Node::start(config, authority).await.unwrap();
        let mut server = Server::new(node).http(listener);
        if let Some(grpc) = grpc {
            server = server.grpc(grpc);
        }
        let shutdown = server.shutdown_handle();
        let handle = tokio::spawn(server.serve());
        let node = TestNode {
            base: format!("http://{addr}"),
            client: reqwest::Client::builder()
                .timeout(DEADLINE)
                .build()
                .unwrap(),
            shutdown,
            handle: Some(handle),
        };
        let n = &node;
        poll_until("the node answers /healthz", move || async move {
            n.get("/healthz").await.0 == 200
        })
        .await;
        node
    }

    /// `method path`: status and body text.
    pub async fn request(&self, method: reqwest::Method, path: &str) -> (u16, String) {
        let resp = self
            .client
            .request(method.clone(), format!("{}{path}", self.base))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    }

    /// GET `path`: status and body text.
    pub async fn text(&self, path: &str) -> (u16, String) {
        self.request(reqwest::Method::GET, path).await
    }

    /// GET `path`: status and JSON body.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let (status, text) = self.text(path).await;
        (status, json(&text))
    }

    /// POST `path` (no body): status and JSON body.
    pub async fn post(&self, path: &str) -> (u16, Value) {
        let (status, text) = self.request(reqwest::Method::POST, path).await;
        (status, json(&text))
    }

    /// Shuts the node down gracefully and returns what the hand-back did.
    pub async fn stop(mut self) -> ShutdownReport {
        self.shutdown.drain();
        let handle = self.handle.take().unwrap();
        tokio::time::timeout(DEADLINE, handle)
            .await
            .expect("the node did not stop in time")
            .unwrap()
            .unwrap()
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.abort();
        }
    }
}

/// Parses a JSON body, failing with the text.
pub fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
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
