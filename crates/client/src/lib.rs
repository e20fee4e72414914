//! idmint-client: ids from idmint nodes, buffered in the application.
//!
//! A [`Client`] keeps, per namespace, a buffer of ids leased from a node over gRPC
//! (`idmint.v1`, docs/grpc.md) and refilled in the background below its low-water mark, so that
//! taking an id does not wait on the network. It is the lowest tier of design.md's chain
//! authority → (upstream node →) node → client, with the same buffer and refill policy as every
//! tier: the core's [`idmint_core::Buffer`] and [`idmint_core::BufferPolicy`], blocks sized from
//! demand (an exponentially weighted moving average). See docs/client.md.
//!
//! - Sequence namespaces: blocks leased with `Block`; the hot path
//!   ([`Namespace::try_next`]) is one `fetch_add` on a window carved from the buffer; a clean
//!   [`Client::close`] hands the unused tail back with `GiveBack` and the block's lease.
//! - Snowflake, UUIDv7 and ULID namespaces: batches fetched with `Next`, each id handed out
//!   only within [`ClientConfig::validity`] of the request that fetched it.
//! - Shard-owned snowflake namespaces: [`Client::next_routed`] asks for ids of one shard
//!   ([`ShardRoute`]: a shard, or a key), unbuffered; with several nodes, sent first to the
//!   node holding the shard's range, from the namespace's shard map (`shard_map.rs`).
//! - Several node urls: a call moves to the next url when a node is unavailable.
//! - Snowflake ids made in the application ([`Client::local_snowflake`], [`LocalSnowflake`]):
//!   a worker id leased from the namespace's pool through the nodes, renewed in the
//!   background, ids made in process with the namespace's layout only while the lease covers
//!   them (design.md invariant 4, `local_snowflake/`).
//! - [`BlockingClient`]: the same for code that is not async.
//! - [`Namespace::stats`]: buffered, served, burned, given back, expired, refills, waits.
//! - [`keys`]: routing a row from its key offline (an id's shard, a key's shard, residue
//!   classes, composite `shard-local` keys).
//!
//! Invariants (docs/design.md; the modules say how each is kept):
//! - (1, transitively) only ids of blocks or answers a node returned are handed out, and only
//!   blocks of the namespace (step, residue class, width); a `Block` whose answer may have been
//!   lost is never sent again to that node: its ids are burned, never served (`nodes.rs`);
//! - each id is handed out at most once, and ids increase per namespace per client (per residue
//!   class when the node's authority has several): `window.rs`, `sequence.rs`, `timed.rs`;
//! - (2, 3) a tail goes back only with the lease of the newest block, to the node that leased
//!   it, once, after the client stopped handing out ids and its refills ended; what cannot go
//!   back is burned, never used again (`client.rs`, `sequence.rs`);
//! - no lock is held across `.await`; no `unwrap` on anything a node sends.
//!
//! Nodes serving TLS are dialled with `https://` urls: [`ClientConfig::tls`] ([`ClientTls`],
//! from `idmint_proto::tls`, shared with the CLI and the upstream authority) names the CA to
//! trust (else the public roots) and the client certificate for nodes that require one; a node
//! with `[auth]` gets [`ClientConfig::token`].
//!
//! What it does not do: keep ids across restarts (a restarted client leases new blocks), or create
//! namespaces of kinds other than sequence (a node auto-creates sequence namespaces only).
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let authority = std::sync::Arc::new(idmint_store::FileAuthority::open(dir.path())?);
//! # let config = idmint_node::FileConfig::parse("[namespaces.events]\nkind = \"ulid\"\n")?.node;
//! # let node = idmint_node::Node::start(config, authority).await?;
//! # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! # let url = format!("http://{}", listener.local_addr()?);
//! # let server = idmint_node::Server::new(node).grpc(listener);
//! # let shutdown = server.shutdown_handle();
//! # let served = tokio::spawn(server.serve());
//! use idmint_client::{Client, Id};
//!
//! // The first url is down: the client moves on to the next.
//! let client = Client::connect(["http://127.0.0.1:9".to_string(), url]).await?;
//! let id = client.next("users").await?;
//! assert!(matches!(id, Id::Sequence(_)));
//! let event = client.next("events").await?; // a ULID, fetched in a batch, fresh
//! assert!(matches!(event, Id::Ulid(_)));
//! client.close().await;
//! # shutdown.drain();
//! # served.await??;
//! # Ok(())
//! # }
//! ```

mod blocking;
mod client;
mod config;
mod error;
mod id;
pub mod keys;
mod local;
mod local_snowflake;
mod namespace;
mod nodes;
mod sequence;
mod shard;
mod shard_map;
mod timed;
mod window;

pub use blocking::{BlockingClient, BlockingLocalIds, BlockingNamespace};
pub use client::{Client, CloseReport};
pub use config::{ClientConfig, ClientTls, ClientTlsError, MAX_BATCH};
pub use error::ClientError;
pub use id::{Id, Kind};
pub use idmint_core::{
    BufferConfig, BufferPolicy, Clock, Layout, ManualClock, Sizing, SystemClock,
};
pub use idmint_proto::nodes::BearerToken;
pub use local::LocalIds;
pub use local_snowflake::{LocalSnowflake, LocalSnowflakeConfig};
pub use namespace::{Namespace, NamespaceStats};
pub use shard::ShardRoute;
/// The gRPC status codes, as [`ClientError::from_grpc`] takes them.
pub use tonic::Code as GrpcCode;
