//! The server: every listener of a node (HTTP, gRPC, RESP, each plain or over TLS), one
//! acceptor and one connection policy for all of them, and the node's shutdown.
//!
//! [`Server`] takes a started [`Node`] and its listeners, and [`Server::serve`] runs them
//! until the node's [`Shutdown`] says to stop, then hands the node's buffers back, once.
//!
//! Invariants, the same for every protocol:
//! - at most `server.max_connections` connections per listener are open at once: a permit is
//!   taken before a connection is accepted ([`accept`]), so the next one waits in the listen
//!   backlog;
//! - every connection is [`conn::Policed`]: its first request within
//!   `server.header_read_timeout_ms` of the accept (the TLS handshake included), no more than
//!   `server.idle_timeout_ms` without a byte while nothing is in flight; the TLS handshake runs
//!   in the connection's own task, never in an accept loop;
//! - **drain** (the first signal): every listener stops accepting and closes its socket, every
//!   connection finishes the requests it has (HTTP answers, gRPC GOAWAY, a RESP command in
//!   progress) and closes; the node creates no namespace and `/readyz` answers 503;
//! - **stop now** (`server.drain_timeout_ms` after the drain began, a second signal, or a
//!   listener that failed): every connection still open is cut, its request futures dropped
//!   (their ids put back, `supply.rs`), the request tasks a protocol spawned included
//!   ([`streams`]);
//! - [`Server::serve`] returns only after every connection task is gone, and only then does the
//!   node stop its background tasks and hand back its buffers ([`Node::shutdown`]): the
//!   hand-back follows the last id handed out (docs/design.md invariant 3).

pub mod accept;
pub mod conn;
pub mod shutdown;
pub mod streams;

use crate::error::NodeError;
use crate::node::{Node, ShutdownReport};
use crate::tls::{Acceptor as TlsAcceptor, MaybeTls, ServerTls};
use accept::{Accepted, Acceptor};
use conn::{Activity, Deadlines, Policed};
use shutdown::Shutdown;
use std::collections::HashMap;
use std::sync::Arc;
use streams::Streams;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// The protocols a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// The HTTP/JSON API (docs/api.md), HTTP/1.1.
    Http,
    /// The gRPC API (`idmint.v1`), HTTP/2.
    Grpc,
    /// The Redis protocol (docs/resp.md).
    Resp,
}

impl Protocol {
    /// Its name in logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Grpc => "grpc",
            Protocol::Resp => "resp",
        }
    }

    /// The ALPN protocol it announces over TLS (none for RESP: Redis clients send none).
    fn alpn(self) -> &'static [&'static [u8]] {
        match self {
            Protocol::Http => &[b"http/1.1"],
            Protocol::Grpc => &[b"h2"],
            Protocol::Resp => &[],
        }
    }
}

/// A connection as a protocol serves it: accepted, its TLS handshake done, policed.
pub type Connection = Policed<MaybeTls>;

/// A node's listeners, served together. See the module docs.
#[derive(Debug)]
pub struct Server {
    node: Arc<Node>,
    listeners: Vec<(Protocol, TcpListener)>,
    tls: Option<ServerTls>,
}

impl Server {
    /// A server of `node` with no listener yet.
    pub fn new(node: Arc<Node>) -> Self {
        Server {
            node,
            listeners: Vec::new(),
            tls: None,
        }
    }

    /// Serves the HTTP API on `listener`.
    pub fn http(self, listener: TcpListener) -> Self {
        self.listen(Protocol::Http, listener)
    }

    /// Serves the gRPC API on `listener`.
    pub fn grpc(self, listener: TcpListener) -> Self {
        self.listen(Protocol::Grpc, listener)
    }

    /// Serves the Redis protocol on `listener`.
    pub fn resp(self, listener: TcpListener) -> Self {
        self.listen(Protocol::Resp, listener)
    }

    /// Serves `protocol` on `listener`.
    pub fn listen(mut self, protocol: Protocol, listener: TcpListener) -> Self {
        self.listeners.push((protocol, listener));
        self
    }

    /// Every listener over TLS with `tls` (`None`: plain).
    pub fn tls(mut self, tls: Option<ServerTls>) -> Self {
        self.tls = tls;
        self
    }

    /// The node's shutdown stages: drain on a first signal, stop now on a second.
    pub fn shutdown_handle(&self) -> Shutdown {
        self.node.shutdown_handle().clone()
    }

    /// Serves every listener until the node's shutdown stops them (see the module docs), then
    /// shuts the node down and returns what the hand-back did. A listener that fails begins
    /// the drain of the others; its error is returned once the node is shut down.
    pub async fn serve(self) -> Result<ShutdownReport, NodeError> {
        let Server {
            node,
            listeners,
            tls,
        } = self;
        let shutdown = node.shutdown_handle().clone();
        let deadline = tokio::spawn(drain_deadline(node.clone(), shutdown.clone()));
        let mut running = JoinSet::new();
        for (protocol, listener) in listeners {
            let tls = tls.as_ref().map(|tls| tls.acceptor(protocol.alpn()));
            running.spawn(serve_listener(
                node.clone(),
                protocol,
                listener,
                tls,
                shutdown.clone(),
            ));
        }
        let mut failure = None;
        while let Some(joined) = running.join_next().await {
            let error = match joined {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(e) => NodeError::FrontEnd(e.to_string()),
            };
            tracing::error!(error = %error, "a listener failed; stopping the others");
            shutdown.drain();
            failure.get_or_insert(error);
        }
        deadline.abort();
        tracing::info!("every connection closed; handing back the unused ids");
        let report = node.shutdown().await;
        match failure {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }
}

/// Once draining begins, waits `server.drain_timeout_ms`, then stops now.
async fn drain_deadline(node: Arc<Node>, shutdown: Shutdown) {
    shutdown.draining().await;
    let timeout = node.config().listen.drain_timeout;
    tracing::info!(
        ?timeout,
        "draining: no new connections; requests in flight may finish"
    );
    tokio::time::sleep(timeout).await;
    if shutdown.stop_now() {
        tracing::warn!(
            ?timeout,
            "drain deadline passed: cutting the connections left"
        );
    }
}

/// The task id of a joined connection task, finished or cut.
fn joined_id(joined: &Result<(tokio::task::Id, ()), tokio::task::JoinError>) -> tokio::task::Id {
    match joined {
        Ok((id, ())) => *id,
        Err(e) => e.id(),
    }
}

/// Accepts on `listener` until draining, each connection in a task of its own; then waits for
/// them to finish, or cuts them on stop-now. Returns once none is left.
async fn serve_listener(
    node: Arc<Node>,
    protocol: Protocol,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    shutdown: Shutdown,
) -> Result<(), NodeError> {
    let limits = node.config().listen;
    let deadlines = Deadlines {
        first_request: limits.header_read_timeout,
        idle: limits.idle_timeout,
    };
    let acceptor = Acceptor::new(
        listener,
        limits.max_connections,
        shutdown.clone(),
        protocol.name(),
    );
    let mut connections = JoinSet::new();
    // The request tasks of each open connection, by the connection task's id.
    let mut requests: HashMap<tokio::task::Id, Streams> = HashMap::new();
    loop {
        while let Some(joined) = connections.try_join_next_with_id() {
            requests.remove(&joined_id(&joined));
        }
        let Some(Accepted { stream, permit }) = acceptor.next().await else {
            break;
        };
        let (node, tls, shutdown) = (node.clone(), tls.clone(), shutdown.clone());
        let streams = Streams::new();
        let tasks = streams.clone();
        let connection = connections.spawn(async move {
            let _permit = permit;
            let activity = Activity::new();
            let handshake = crate::tls::handshake(
                stream,
                tls.as_ref(),
                deadlines.first_request,
                protocol.name(),
            );
            let io = tokio::select! {
                io = handshake => match io {
                    Some(io) => io,
                    None => return,
                },
                _ = shutdown.draining() => return,
            };
            let conn = Policed::new(io, activity, deadlines);
            match protocol {
                Protocol::Http => crate::http::serve_connection(node, conn, shutdown).await,
                Protocol::Grpc => crate::grpc::serve_connection(node, conn, shutdown, tasks).await,
                Protocol::Resp => crate::resp::serve_connection(node, conn, shutdown).await,
            }
        });
        requests.insert(connection.id(), streams);
    }
    drop(acceptor);
    tracing::info!(
        front_end = protocol.name(),
        open = connections.len(),
        "stopped accepting; open connections finish their requests"
    );
    tokio::select! {
        _ = async {
            while let Some(joined) = connections.join_next_with_id().await {
                requests.remove(&joined_id(&joined));
            }
        } => {}
        _ = shutdown.stopping_now() => {
            if !connections.is_empty() {
                tracing::warn!(front_end = protocol.name(), cut = connections.len(), "cutting the connections still open");
            }
            connections.shutdown().await;
        }
    }
    // A connection cut above leaves its request tasks behind: cut them too, and wait.
    for (_, streams) in requests.drain() {
        streams.cut().await;
    }
    tracing::info!(front_end = protocol.name(), "every connection closed");
    Ok(())
}
