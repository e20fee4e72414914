//! The gRPC serving loop: a [`crate::FrontEnd`] that serves [`super::IdmintService`] over
//! HTTP/2 (tonic) on a listener, stopped by the node's [`Shutdown`] stages.
//!
//! Invariants:
//! - on `Draining` it stops accepting and closes the listening socket; each connection is told
//!   to go away (HTTP/2 GOAWAY) and finishes the requests it has (streams end with
//!   `shutting_down` at their next chunk); the loop returns once every connection closed;
//! - on `StopNow` every request in flight is cut (its handler's future dropped, its ids put
//!   back) and the loop returns once none is left ([`super::gate`]), so the node's hand-back
//!   runs after every gRPC request future is gone, as after HTTP's;
//! - no client can hold a connection forever: an HTTP/2 keep-alive ping every
//!   `server.idle_timeout_ms`, unanswered for 20 s, closes it, and each connection serves at
//!   most `server.max_connections` requests at once.
//!
//! What it does not do: TLS, limit the number of connections (HTTP's `max_connections` bounds
//! HTTP/1.1 connections only; see docs/grpc.md), or the hand-back itself
//! ([`crate::serve_front_ends`]).

use super::gate::Gate;
use super::IdmintService;
use crate::error::NodeError;
use crate::registry::Node;
use crate::shutdown::Shutdown;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

/// How long a keep-alive ping may go unanswered before the connection is closed.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Serves the gRPC API of `node` on `listener` until `shutdown` says to stop (see the module
/// docs). Returns once no request is left.
pub async fn serve(
    node: Arc<Node>,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), NodeError> {
    let limits = node.config().listen;
    let gate = Gate::new();
    let service = IdmintService::new(node, gate.clone(), shutdown.clone()).into_server();
    let incoming = TcpListenerStream::new(listener);
    let draining = shutdown.clone();
    let server = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .http2_keepalive_interval(Some(limits.idle_timeout))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .concurrency_limit_per_connection(limits.max_connections)
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, async move { draining.draining().await });
    let served = tokio::select! {
        served = server => served.map_err(|e| NodeError::FrontEnd(format!("grpc: {e}"))),
        _ = shutdown.stopping_now() => {
            if gate.in_flight() > 0 {
                tracing::warn!(cut = gate.in_flight(), "grpc: cutting the requests still in flight");
            }
            Ok(())
        }
    };
    tracing::info!("grpc: stopped accepting; waiting for the requests in flight");
    gate.close().await;
    tracing::info!("grpc: every request finished");
    served
}
