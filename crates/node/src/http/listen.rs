//! The HTTP accept loop: HTTP/1.1 connections on hyper, each in its own task, bounded in number
//! and in time, and stopped by the node's [`Shutdown`] stages.
//!
//! Invariants (issue 8, finding 6: one slow client must never hold shutdown hostage):
//! - at most `server.max_connections` connections are served at once: the loop takes a permit
//!   before it accepts, so the next connection waits in the operating system's listen backlog
//!   (its handshake done, its request unread) until one closes;
//! - a connection that does not deliver a request's headers within `header_read_timeout` is
//!   closed (hyper's timer: on a new connection, and between the requests of a kept-alive one);
//!   one that goes `idle_timeout` without a byte read or written while none of its requests is
//!   being handled is closed too (a client stalled mid-body, or not reading its answer);
//! - on `Draining` the loop stops accepting and closes the listening socket; each connection
//!   finishes the request it is on and closes (hyper's graceful shutdown); on `StopNow` every
//!   connection task is aborted and [`listen`] returns only once all of them are gone, so every
//!   request future has been dropped (its ids put back, `supply.rs`) before the node hands back
//!   its buffers.
//!
//! - with TLS ([`listen_with_tls`]), the handshake runs in the connection's task, bounded by
//!   `header_read_timeout` like the headers that follow it: a client stalled in the handshake,
//!   or speaking plain HTTP to the TLS port, is closed then and never blocks the accept loop.
//!
//! What it does not do: HTTP/2, or the hand-back itself ([`crate::serve_front_ends`]).

use crate::accept::{Accepted, Acceptor};
use crate::config::ListenConfig;
use crate::error::NodeError;
use crate::registry::Node;
use crate::shutdown::Shutdown;
use crate::tls::{MaybeTls, ServerTls};
use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::ServiceExt;

/// Serves the HTTP API of `node` on `listener` until `shutdown` says to stop (see the module
/// docs). Returns once no connection is left.
pub async fn listen(
    node: Arc<Node>,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), NodeError> {
    listen_with_tls(node, listener, None, shutdown).await
}

/// [`listen`], over TLS when `tls` is given (ALPN `http/1.1`).
pub async fn listen_with_tls(
    node: Arc<Node>,
    listener: TcpListener,
    tls: Option<ServerTls>,
    shutdown: Shutdown,
) -> Result<(), NodeError> {
    let limits = node.config().listen;
    let tls = tls.map(|tls| tls.acceptor(&[b"http/1.1"]));
    let app = super::router(node);
    let acceptor = Acceptor::new(listener, limits.max_connections, shutdown.clone(), "http");
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let Some(Accepted { stream, permit }) = acceptor.next().await else {
            break;
        };
        connections.spawn(connection(
            stream,
            tls.clone(),
            app.clone(),
            limits,
            shutdown.clone(),
            permit,
        ));
    }
    drop(acceptor);
    tracing::info!(
        open = connections.len(),
        "http: stopped accepting; open connections finish their requests"
    );
    tokio::select! {
        _ = async { while connections.join_next().await.is_some() {} } => {}
        _ = shutdown.stopping_now() => {
            if !connections.is_empty() {
                tracing::warn!(cut = connections.len(), "http: cutting the connections still open");
            }
            connections.shutdown().await;
        }
    }
    tracing::info!("http: every connection closed");
    Ok(())
}

/// Serves one connection until it ends, it is idle too long, or shutdown cuts it. Holds its
/// permit until then.
async fn connection(
    stream: TcpStream,
    tls: Option<crate::tls::Acceptor>,
    app: Router,
    limits: ListenConfig,
    shutdown: Shutdown,
    _permit: OwnedSemaphorePermit,
) {
    let handshake = crate::tls::handshake(stream, tls.as_ref(), limits.header_read_timeout, "http");
    let stream = tokio::select! {
        stream = handshake => match stream {
            Some(stream) => stream,
            None => return,
        },
        _ = shutdown.draining() => return,
    };
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Tracked {
        inner: stream,
        activity: activity.clone(),
    });
    let requests = activity.clone();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let in_flight = InFlight::begin(requests.clone());
        let app = app.clone();
        async move {
            let _in_flight = in_flight;
            app.oneshot(request).await
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut draining = false;
    loop {
        // While a request is handled the connection is not idle: look again a period later.
        let idle_at = if activity.in_flight.load(Ordering::Relaxed) > 0 {
            Instant::now() + limits.idle_timeout
        } else {
            activity.idle_deadline(limits.idle_timeout)
        };
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "http connection ended with an error");
                }
                return;
            }
            _ = shutdown.draining(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            // Dropping the connection cuts it, with any request in flight.
            _ = shutdown.stopping_now() => return,
            _ = tokio::time::sleep_until(idle_at) => {
                if activity.is_idle(limits.idle_timeout) {
                    tracing::debug!("http connection idle too long; closing it");
                    return;
                }
            }
        }
    }
}

/// When a connection last read or wrote a byte, and how many of its requests are in flight.
#[derive(Debug)]
struct Activity {
    start: Instant,
    /// Milliseconds from `start` to the last byte read or written (or the end of the last
    /// request).
    last_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Self {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// When the connection becomes idle if nothing happens before.
    fn idle_deadline(&self, idle: Duration) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed)) + idle
    }

    /// No request in flight and nothing read or written for `idle`.
    fn is_idle(&self, idle: Duration) -> bool {
        self.in_flight.load(Ordering::Relaxed) == 0 && Instant::now() >= self.idle_deadline(idle)
    }
}

/// One request being handled; the connection is not idle meanwhile.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn begin(activity: Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A stream that records every read and write that moved bytes.
struct Tracked {
    inner: MaybeTls,
    activity: Arc<Activity>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
