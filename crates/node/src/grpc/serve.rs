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
//! - at most `server.max_connections` gRPC connections are served at once (counted apart from
//!   HTTP's): the accept loop takes a permit before it accepts, and each connection holds it
//!   until it closes, so the next one waits in the listen backlog;
//! - no client can hold a connection forever: an HTTP/2 keep-alive ping every
//!   `server.idle_timeout_ms`, unanswered for 20 s, closes it, and each connection serves at
//!   most `server.max_connections` requests at once.
//!
//! - with TLS ([`serve_with_tls`]; ALPN `h2`), each handshake runs in its own task, within
//!   `server.header_read_timeout_ms`, holding the connection's permit: a client stalled in the
//!   handshake (or speaking plain text to the TLS port) is closed then and never blocks the
//!   accept loop; a failed handshake closes that connection only.
//!
//! What it does not do: client certificates, or the hand-back itself
//! ([`crate::serve_front_ends`]).

use super::gate::Gate;
use super::IdmintService;
use crate::accept::{Accepted, Acceptor};
use crate::error::NodeError;
use crate::registry::Node;
use crate::shutdown::Shutdown;
use crate::tls::{MaybeTls, ServerTls};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// How long a keep-alive ping may go unanswered before the connection is closed.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Serves the gRPC API of `node` on `listener` until `shutdown` says to stop (see the module
/// docs). Returns once no request is left.
pub async fn serve(
    node: Arc<Node>,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), NodeError> {
    serve_with_tls(node, listener, None, shutdown).await
}

/// [`serve`], over TLS when `tls` is given (ALPN `h2`).
pub async fn serve_with_tls(
    node: Arc<Node>,
    listener: TcpListener,
    tls: Option<ServerTls>,
    shutdown: Shutdown,
) -> Result<(), NodeError> {
    let limits = node.config().listen;
    let tls = tls.map(|tls| tls.acceptor(&[b"h2"]));
    let gate = Gate::new();
    let service = IdmintService::new(node, gate.clone(), shutdown.clone()).into_server();
    let (accepted, incoming) = mpsc::channel(1);
    let accepting = tokio::spawn(accept(
        Acceptor::new(listener, limits.max_connections, shutdown.clone(), "grpc"),
        tls,
        limits.header_read_timeout,
        accepted,
    ));
    let incoming = ReceiverStream::new(incoming);
    let draining = shutdown.clone();
    let server = tonic::transport::Server::builder()
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
    accepting.abort();
    let _ = accepting.await;
    gate.close().await;
    tracing::info!("grpc: every request finished");
    served
}

/// Hands the acceptor's connections, each with its permit (and, with `tls`, once its handshake
/// is done within `handshake_timeout`, in a task of its own), to the server until draining
/// begins; the listening socket closes, and the handshakes still running are dropped, when it
/// returns.
async fn accept(
    acceptor: Acceptor,
    tls: Option<crate::tls::Acceptor>,
    handshake_timeout: Duration,
    accepted: mpsc::Sender<io::Result<Limited>>,
) {
    let mut handshakes = JoinSet::new();
    while let Some(Accepted { stream, permit }) = acceptor.next().await {
        while handshakes.try_join_next().is_some() {}
        let Some(tls) = &tls else {
            let limited = Limited {
                stream: MaybeTls::Plain(stream),
                _permit: permit,
            };
            if accepted.send(Ok(limited)).await.is_err() {
                return; // the server stopped
            }
            continue;
        };
        let (tls, accepted) = (tls.clone(), accepted.clone());
        handshakes.spawn(async move {
            let handshake = crate::tls::handshake(stream, Some(&tls), handshake_timeout, "grpc");
            if let Some(stream) = handshake.await {
                let limited = Limited {
                    stream,
                    _permit: permit,
                };
                let _ = accepted.send(Ok(limited)).await;
            }
        });
    }
}

/// A connection holding one of the `max_connections` permits until it is dropped.
#[derive(Debug)]
struct Limited {
    stream: MaybeTls,
    _permit: OwnedSemaphorePermit,
}

impl Connected for Limited {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.tcp().connect_info()
    }
}

impl AsyncRead for Limited {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Limited {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
