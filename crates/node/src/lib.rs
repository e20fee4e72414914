//! idmint-node: the server library behind `idmint serve`.
//!
//! A [`Node`] serves namespaces of every kind. Sequence namespaces keep a supply of blocks from
//! the node's [`Authority`], refilled by a background task below a low-water mark so that in
//! steady state no request waits on the authority; snowflake, UUIDv7 and ULID namespaces
//! generate ids locally. Every request of every front-end takes one path: the node's
//! operations ([`Node::take_ids`], [`Node::take_block`], [`Node::give_back`], [`Node::decode`],
//! [`Node::namespace_info`], ...) authenticate, authorize, limit,
//! count and carry it out; the front-ends (HTTP/JSON, gRPC `idmint.v1`, RESP) only parse their
//! protocol and encode the answer. A [`Server`] serves them all: one acceptor and one
//! connection policy for every listener, plain or TLS, and the node's [`Shutdown`].
//!
//! An embedder opens the node's store checked against its node record ([`open_store`]), starts the
//! [`Node`], and serves it:
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use idmint_node::{open_store, Node, NodeConfig, Server};
//! let config = idmint_node::FileConfig::parse("")?;
//! let store = open_store(&config, std::path::Path::new("/var/lib/idmint"), false).await?;
//! let node = Node::start(config.node, store).await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7878").await?;
//! let server = Server::new(node).http(listener);
//! let stop = server.shutdown_handle(); // stop.drain() on a signal
//! let report = server.serve().await?;
//! # drop(stop); let _ = report; Ok(()) }
//! ```
//!
//! Invariants (docs/design.md, 1-3 and 6): an id is handed out only from a block the authority
//! returned after making its watermark durable; a restarted node asks for new blocks and never
//! reuses old ones; a clean shutdown hands back the unused tail of each namespace's newest block
//! by compare-and-swap, after the last request future is gone; a 32-bit namespace that runs out
//! answers `namespace_exhausted`, never a wrapped id. Nothing a client sends before
//! authenticating can crash, stall or exhaust the node: every connection is bounded in number
//! and in time ([`server`]), every request in size before it is decoded.
//!
//! Snowflake namespaces issue under a worker lease (module `worker`): never below the floor an
//! earlier holder of the worker id recorded, never above the floor this node recorded, never
//! after the lease could have expired (docs/design.md invariant 4).
//!
//! What it does not do: read files or the environment (the binary does; the host name for
//! `worker = "ordinal"`, the lease holder's name, the TLS certificate and key
//! ([`tls::ServerTls::load`]) and the data directory's node record ([`open_store`]) are the
//! exceptions), or choose the authority (it is given one).

pub mod auth;
pub(crate) mod block_gate;
pub mod config;
pub mod error;
pub mod grpc;
pub mod http;
pub mod logs;
pub mod metrics;
pub mod namespace;
pub(crate) mod node;
pub mod peers;
pub mod resp;
pub mod server;
pub mod shards;
mod store;
pub mod strict;
pub(crate) mod supply;
pub mod time;
pub mod tls;
pub(crate) mod worker;

pub use config::{
    CacheMode, ConfigError, FileConfig, KeepBlocks, KeptBlocks, KindConfig, LeaseSettings,
    ListenConfig, NodeConfig, TlsFiles, WorkerConfig,
};
pub use error::{IdError, NodeError};
pub use idmint_store::Authority;
pub use node::leases::{LeaseCall, LeaseOutcome};
pub use node::readiness::Readiness;
pub use node::requests::{Credentials, GivenBack, IdStream, Limit, Taken, MAX_STREAM_TOTAL};
pub use node::{Node, ShutdownReport};
pub use server::shutdown::{Shutdown, Stage};
pub use server::{Protocol, Server};
pub use store::{open_store, open_store_or_later, OpenStoreError};
