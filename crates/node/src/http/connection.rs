//! One HTTP/1.1 connection on hyper, as the server hands it over (accepted, its TLS handshake
//! done, policed by [`crate::server::conn`]).
//!
//! Invariants:
//! - every request is reported to the connection's activity while it is handled, so a
//!   connection is never idle mid-request;
//! - the first request's headers are bounded by the server's first-request deadline
//!   (`header_read_timeout_ms` from accept); every later request's by hyper's header timer,
//!   which hyper starts when it waits for the next head, right after an answer: so it runs at
//!   the larger of `header_read_timeout_ms` and `idle_timeout_ms`, and a quiet keep-alive
//!   connection closes at `idle_timeout_ms` (the server's idle rule), as on every door;
//! - on `Draining` the connection finishes the request it is on and closes (hyper's graceful
//!   shutdown); on `StopNow` the server aborts the task.

use crate::node::Node;
use crate::server::shutdown::Shutdown;
use crate::server::Connection;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::sync::Arc;
use tower::ServiceExt;

/// Serves `conn` until it ends, the policy closes it, or draining finishes its request.
pub(crate) async fn serve_connection(node: Arc<Node>, conn: Connection, shutdown: Shutdown) {
    let limits = node.config().listen;
    let app = super::router(node);
    let activity = conn.activity().clone();
    let transport = super::Transport {
        tls: matches!(conn.get_ref(), crate::tls::MaybeTls::Tls(_)),
    };
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        let in_flight = activity.begin();
        request.extensions_mut().insert(transport);
        let app = app.clone();
        async move {
            let _in_flight = in_flight;
            app.oneshot(request).await
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout.max(limits.idle_timeout));
    let served = builder.serve_connection(TokioIo::new(conn), service);
    tokio::pin!(served);
    tokio::select! {
        result = served.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "http connection ended with an error");
            }
            return;
        }
        _ = shutdown.draining() => {}
    }
    served.as_mut().graceful_shutdown();
    if let Err(e) = served.await {
        tracing::debug!(error = %e, "http connection ended with an error while draining");
    }
}
