//! idmint-node: the server library behind `idmint serve`.
//!
//! A [`Node`] serves namespaces of every kind. Sequence namespaces keep a [`supply::Supply`] of
//! blocks from a block source (the node's [`Authority`]), refilled by a background task below a
//! low-water mark so that in steady state no request waits on the authority; snowflake, UUIDv7
//! and ULID namespaces generate ids locally. The domain ([`namespace::Namespace`]: ids, blocks,
//! `info()`, `decode()`) is protocol-free; [`http::router`] is the HTTP/JSON front-end over it,
//! answering with [`idmint_api`] types; [`resp`] is the RESP (Redis protocol) front-end and
//! [`grpc`] the gRPC one (`idmint.v1`), siblings of it over the same domain; [`serve`] (and
//! [`run`], which starts the node first) ties
//! it together with graceful shutdown, bounded: [`serve_with`] and [`serve_front_ends`] take a
//! [`Shutdown`] whose stages (drain, then stop now on the drain deadline or a second signal)
//! every front-end shares, and hand the buffers back exactly once after all of them stopped.
//!
//! Invariants (docs/design.md, 1-3 and 6): an id is handed out only from a block the authority returned
//! after making its watermark durable; a restarted node asks for new blocks and never reuses old
//! ones (it keeps nothing on disk itself); a clean shutdown hands back the unused tail of each
//! namespace's newest block by compare-and-swap; a 32-bit namespace that runs out answers
//! `namespace_exhausted`, never a wrapped id. No client can keep a node from shutting down: a
//! connection is bounded by `server.header_read_timeout_ms` and `idle_timeout_ms`, their number
//! by `max_connections`, the drain by `drain_timeout_ms`; and the hand-back runs whatever the
//! drain did (issue 8, finding 6).
//!
//! Snowflake namespaces issue under a worker lease ([`worker`]): never below the floor an
//! earlier holder of the worker id recorded, never above the floor this node recorded, never
//! after the lease could have expired (docs/design.md invariant 4).
//!
//! What it does not do: read files or the environment (the binary does; the host name for
//! `worker = "ordinal"`, the lease holder's name and the TLS certificate and key
//! ([`tls::ServerTls::load`], called by the binary) are the exceptions), or choose the
//! authority (it is given one).

pub mod accept;
pub mod auth;
pub mod config;
pub mod error;
pub mod grpc;
pub mod http;
pub mod metrics;
pub mod namespace;
pub mod registry;
pub mod resp;
pub mod shutdown;
pub mod supply;
pub mod time;
pub mod tls;
pub mod verify;
pub mod worker;

pub use config::{
    CacheMode, ConfigError, FileConfig, KindConfig, LeaseSettings, ListenConfig, NodeConfig,
    TlsFiles, WorkerConfig,
};
pub use error::{IdError, NodeError};
pub use idmint_store::Authority;
pub use registry::{Node, ShutdownReport};
pub use shutdown::{Shutdown, Stage};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Serves `config`'s namespaces from `authority` on `listener` until `shutdown` resolves, then
/// stops accepting, answers the requests in flight (for at most `server.drain_timeout_ms`),
/// stops the refill tasks and hands back the unused tails. Returns what the hand-back did.
/// [`Node::start`] then [`serve`]; call those two to act between them (a binary announcing that
/// it listens once the declared namespaces are set up, say).
pub async fn run(
    listener: tokio::net::TcpListener,
    config: NodeConfig,
    authority: Arc<dyn Authority>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<ShutdownReport, NodeError> {
    let node = Node::start(config, authority).await?;
    serve(node, listener, shutdown).await
}

/// Serves a started `node` on `listener` until `shutdown` resolves, then drains and shuts the
/// node down as [`serve_with`] does after [`Shutdown::drain`]. For a second stage ("stop now"
/// on a second signal) use [`serve_with`].
pub async fn serve(
    node: Arc<Node>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<ShutdownReport, NodeError> {
    let stages = Shutdown::new();
    let trigger = stages.clone();
    let signal = tokio::spawn(async move {
        shutdown.await;
        trigger.drain();
    });
    let served = serve_with(node, listener, stages).await;
    signal.abort();
    served
}

/// Serves the HTTP API of a started `node` on `listener` until `shutdown` moves on, then shuts
/// the node down: see [`serve_front_ends`], with HTTP as the one front-end.
pub async fn serve_with(
    node: Arc<Node>,
    listener: tokio::net::TcpListener,
    shutdown: Shutdown,
) -> Result<ShutdownReport, NodeError> {
    let http = http::listen(node.clone(), listener, shutdown.clone());
    serve_front_ends(node, shutdown, vec![Box::pin(http)]).await
}

/// One front-end's serving loop: it returns once `Draining` finished its connections or
/// `StopNow` cut them (see [`http::listen()`]).
pub type FrontEnd = Pin<Box<dyn Future<Output = Result<(), NodeError>> + Send>>;

/// Runs `front_ends` (each listening on its own socket, all watching `shutdown`) until every one
/// has stopped, then shuts `node` down ([`Node::shutdown`]: stop the refills, hand back the
/// unused tails) exactly once, and returns what the hand-back did.
///
/// The stages, each logged: when `shutdown` begins draining, the node refuses to create
/// namespaces and the front-ends stop accepting and finish the requests in flight; if they are
/// not done within `server.drain_timeout_ms` (or [`Shutdown::stop_now`] is called: a second
/// signal), the connections left are cut. Either way the hand-back runs, after every front-end
/// returned, so after every request future was dropped. A front-end that fails begins the
/// drain of the others; its error is returned once the node is shut down.
pub async fn serve_front_ends(
    node: Arc<Node>,
    shutdown: Shutdown,
    front_ends: Vec<FrontEnd>,
) -> Result<ShutdownReport, NodeError> {
    let deadline = tokio::spawn(drain_deadline(
        node.clone(),
        shutdown.clone(),
        node.config().listen.drain_timeout,
    ));
    let mut running = tokio::task::JoinSet::new();
    for front_end in front_ends {
        running.spawn(front_end);
    }
    let mut failure = None;
    while let Some(joined) = running.join_next().await {
        let error = match joined {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e,
            Err(e) => NodeError::FrontEnd(e.to_string()),
        };
        tracing::error!(error = %error, "a front-end failed; stopping the others");
        shutdown.drain();
        failure.get_or_insert(error);
    }
    deadline.abort();
    tracing::info!("every front-end stopped; handing back the unused ids");
    let report = node.shutdown().await;
    tracing::info!(
        given_back = report.given_back,
        burned = report.burned,
        "stopped"
    );
    match failure {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// Waits for the drain to begin, then for `drain_timeout` or a second signal, and cuts.
async fn drain_deadline(node: Arc<Node>, shutdown: Shutdown, drain_timeout: Duration) {
    shutdown.draining().await;
    node.begin_drain();
    if shutdown.stage() == Stage::StopNow {
        tracing::warn!("shutting down at once: cutting requests in flight");
        return;
    }
    tracing::info!(
        deadline = ?drain_timeout,
        "shutting down: finishing requests in flight"
    );
    tokio::select! {
        _ = tokio::time::sleep(drain_timeout) => {
            tracing::warn!(
                deadline = ?drain_timeout,
                "drain deadline passed: cutting requests still in flight (server.drain_timeout_ms)"
            );
            shutdown.stop_now();
        }
        _ = shutdown.stopping_now() => {
            tracing::warn!("stopping now (second signal): cutting requests in flight");
        }
    }
}
