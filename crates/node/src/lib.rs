//! idmint-node: the server library behind `idmint serve`.
//!
//! A [`Node`] serves namespaces of every kind. Sequence namespaces keep a [`supply::Supply`] of
//! blocks from a block source (the node's [`Authority`]), refilled by a background task below a
//! low-water mark so that in steady state no request waits on the authority; snowflake, UUIDv7
//! and ULID namespaces generate ids locally. The domain ([`namespace::Namespace`]: ids, blocks,
//! `info()`, `decode()`) is protocol-free; [`http::router`] is the HTTP/JSON front-end over it,
//! answering with [`idmint_api`] types; [`resp::serve`] is the RESP (Redis protocol) front-end,
//! a sibling of it over the same domain; [`serve`] (and [`run`], which starts the node first) ties
//! it together with graceful shutdown.
//!
//! Invariants (docs/design.md, 1-3 and 6): an id is handed out only from a block the authority returned
//! after making its watermark durable; a restarted node asks for new blocks and never reuses old
//! ones (it keeps nothing on disk itself); a clean shutdown hands back the unused tail of each
//! namespace's newest block by compare-and-swap; a 32-bit namespace that runs out answers
//! `namespace_exhausted`, never a wrapped id.
//!
//! What it does not do: read files or the environment (the binary does), choose the authority
//! (it is given one), gRPC (not built yet), or snowflake worker leases (worker ids come from
//! configuration).

pub mod config;
pub mod error;
pub mod http;
pub mod metrics;
pub mod namespace;
pub mod registry;
pub mod resp;
pub mod supply;
pub mod time;

pub use config::{CacheMode, ConfigError, FileConfig, KindConfig, NodeConfig};
pub use error::{IdError, NodeError};
pub use idmint_store::Authority;
pub use registry::{Node, ShutdownReport};

use std::future::Future;
use std::sync::Arc;

/// Serves `config`'s namespaces from `authority` on `listener` until `shutdown` resolves, then
/// stops accepting, answers the requests in flight, stops the refill tasks and hands back the
/// unused tails. Returns what the hand-back did. [`Node::start`] then [`serve`]; call those two
/// to act between them (a binary announcing that it listens once the declared namespaces are set
/// up, say).
pub async fn run(
    listener: tokio::net::TcpListener,
    config: NodeConfig,
    authority: Arc<dyn Authority>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<ShutdownReport, NodeError> {
    let node = Node::start(config, authority).await?;
    serve(node, listener, shutdown).await
}

/// Serves a started `node` on `listener` until `shutdown` resolves, then stops accepting, answers
/// the requests in flight, and shuts the node down ([`Node::shutdown`]). Returns what the
/// hand-back did. If serving fails, the node is shut down all the same (its unused ids are
/// handed back) before the error returns.
pub async fn serve(
    node: Arc<Node>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<ShutdownReport, NodeError> {
    let app = http::router(node.clone());
    let draining = node.clone();
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            draining.begin_drain();
            tracing::info!("shutting down: finishing requests in flight");
        })
        .await;
    let report = node.shutdown().await;
    tracing::info!(
        given_back = report.given_back,
        burned = report.burned,
        "stopped"
    );
    served?;
    Ok(report)
}
