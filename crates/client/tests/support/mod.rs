//! A real node in process for the client's tests: `idmint_node` over the file store in a
//! temporary directory, its gRPC front-end on `127.0.0.1:0`, served by `serve_front_ends` as
//! `crates/node/tests/grpc.rs` does. No mocks.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use idmint_node::grpc::proto::{self, idmint_client::IdmintClient, namespace_info::Kind};
use idmint_node::{FileConfig, Node, NodeConfig, Shutdown, ShutdownReport};
use idmint_store::FileAuthority;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

pub const DEADLINE: Duration = Duration::from_secs(30);

/// How long nodes and clients in tests wait for a refill: long enough never to be the bound.
pub const WAIT: Duration = Duration::from_secs(60);

/// A client configuration for tests: the defaults, with waits and call timeouts that are never
/// what a test runs into (a dead url or a cut connection fails at once, not by timeout).
pub fn config<S: Into<String>>(urls: impl IntoIterator<Item = S>) -> idmint_client::ClientConfig {
    let mut config = idmint_client::ClientConfig::new(urls);
    config.refill_wait = WAIT;
    config.op_timeout = WAIT + Duration::from_secs(10);
    config
}

/// A client of `urls` with [`config`] and the system clock.
pub async fn client<S: Into<String>>(urls: impl IntoIterator<Item = S>) -> idmint_client::Client {
    idmint_client::Client::connect_with(config(urls), Arc::new(idmint_client::SystemClock::new()))
        .await
        .unwrap()
}

/// A node serving gRPC over a file store in its own temporary directory.
pub struct TestNode {
    pub addr: SocketAddr,
    shutdown: Shutdown,
    served: tokio::task::JoinHandle<Result<ShutdownReport, idmint_node::NodeError>>,
    _dir: tempfile::TempDir,
}

impl TestNode {
    /// A node with `toml` as its configuration (`""`: the defaults, auto_create on).
    pub async fn start(toml: &str) -> TestNode {
        let dir = tempfile::tempdir().unwrap();
        let authority = Arc::new(FileAuthority::open(dir.path()).unwrap());
        Self::start_on(authority, toml, dir).await
    }

    /// A node on `authority` (shared by several nodes, as a database outlives the nodes on it).
    pub async fn start_on(
        authority: Arc<dyn idmint_store::Authority>,
        toml: &str,
        dir: tempfile::TempDir,
    ) -> TestNode {
        let mut config: NodeConfig = FileConfig::parse(toml).unwrap().node;
        // No timing bound in tests: a request on an empty buffer waits for the store as long
        // as it takes (a loaded machine's fsync), up to the longest the node allows.
        config.refill_wait = WAIT;
        Self::start_at(authority, dir, "127.0.0.1:0".parse().unwrap(), config).await
    }

    /// A node on `authority` listening on `addr` (a stopped node's, to start it again there).
    pub async fn restart_at(
        authority: Arc<dyn idmint_store::Authority>,
        toml: &str,
        dir: tempfile::TempDir,
        addr: SocketAddr,
    ) -> TestNode {
        let mut config: NodeConfig = FileConfig::parse(toml).unwrap().node;
        config.refill_wait = WAIT;
        Self::start_at(authority, dir, addr, config).await
    }

    async fn start_at(
        authority: Arc<dyn idmint_store::Authority>,
        dir: tempfile::TempDir,
        addr: SocketAddr,
        config: NodeConfig,
    ) -> TestNode {
        let node = Node::start(config, authority).await.unwrap();
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = idmint_node::Server::new(node).grpc(listener);
        let shutdown = server.shutdown_handle();
        let served = tokio::spawn(server.serve());
        TestNode {
            addr,
            shutdown,
            served,
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The node's state of sequence namespace `ns`.
    pub async fn sequence(&self, ns: &str) -> proto::SequenceState {
        let channel = tonic::transport::Endpoint::from_shared(self.url())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = IdmintClient::new(channel);
        let info = client
            .namespace(proto::NamespaceRequest {
                namespace: ns.into(),
            })
            .await
            .unwrap()
            .into_inner();
        match info.kind {
            Some(Kind::Sequence(s)) => s.state.unwrap(),
            other => panic!("{other:?}"),
        }
    }

    pub async fn stop(self) -> ShutdownReport {
        self.shutdown.drain();
        tokio::time::timeout(DEADLINE, self.served)
            .await
            .expect("the node stops")
            .unwrap()
            .unwrap()
    }
}

/// A url nothing listens on: a port bound, then released.
pub async fn dead_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}
