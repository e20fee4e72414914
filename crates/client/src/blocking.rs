//! [`BlockingClient`]: the client for code that is not async.
//!
//! It owns a small tokio runtime (one worker thread) on which the client's refill tasks run in
//! the background, and blocks the calling thread only when a call must wait on the network:
//! [`BlockingClient::next`] first tries the buffer without blocking, like
//! [`Namespace::try_next`]. The same invariants as [`Client`]'s hold (it is one).
//!
//! Call it from plain threads, never from inside an async runtime (blocking there would stall
//! the runtime; tokio panics on it). Drop it from a plain thread too.

use crate::client::{Client, CloseReport};
use crate::config::ClientConfig;
use crate::error::ClientError;
use crate::id::Id;
use crate::local::LocalIds;
use crate::namespace::{Namespace, NamespaceStats};
use crate::shard::ShardRoute;
use idmint_core::{Clock, SystemClock};
use std::sync::Arc;
use tokio::runtime::Runtime;

/// A [`Client`] for non-async code. See the module docs.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # // A node in process, on its own runtime: the file store in a temporary directory.
/// # let rt = tokio::runtime::Runtime::new()?;
/// # let dir = tempfile::tempdir()?;
/// # let (url, shutdown, served) = rt.block_on(async {
/// #     let authority = std::sync::Arc::new(idmint_store::FileAuthority::open(dir.path())?);
/// #     let node = idmint_node::Node::start(idmint_node::NodeConfig::default(), authority).await?;
/// #     let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// #     let url = format!("http://{}", listener.local_addr()?);
/// #     let server = idmint_node::Server::new(node).grpc(listener);
/// #     let shutdown = server.shutdown_handle();
/// #     let served = tokio::spawn(server.serve());
/// #     Ok::<_, Box<dyn std::error::Error>>((url, shutdown, served))
/// # })?;
/// use idmint_client::BlockingClient;
///
/// let client = BlockingClient::connect([url])?;
/// let a = client.next("orders")?;
/// let b = client.next("orders")?;
/// assert!(b > a);
/// let handles: Vec<_> = (0..2)
///     .map(|_| {
///         let client = client.clone();
///         std::thread::spawn(move || client.next_batch("orders", 100))
///     })
///     .collect();
/// for h in handles {
///     assert_eq!(h.join().expect("thread")?.len(), 100);
/// }
/// let report = client.close()?;
/// println!("given back {}, burned {}", report.given_back, report.burned);
/// # shutdown.drain();
/// # rt.block_on(served)??;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct BlockingClient {
    runtime: Arc<Runtime>,
    client: Client,
}

impl BlockingClient {
    /// A client of the nodes at `urls` with the default [`ClientConfig`].
    pub fn connect<I, S>(urls: I) -> Result<BlockingClient, ClientError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        BlockingClient::connect_with(ClientConfig::new(urls), Arc::new(SystemClock::new()))
    }

    /// A client with `config` and `clock` (see [`Client::connect_with`]).
    pub fn connect_with(
        config: ClientConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<BlockingClient, ClientError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("idmint-client")
            .enable_all()
            .build()
            .map_err(|e| ClientError::Runtime {
                message: e.to_string(),
            })?;
        let client = runtime.block_on(Client::connect_with(config, clock))?;
        Ok(BlockingClient {
            runtime: Arc::new(runtime),
            client,
        })
    }

    /// The next id of `ns`; blocks only when none is buffered.
    pub fn next(&self, ns: &str) -> Result<Id, ClientError> {
        if let Some(id) = self.client.try_next(ns) {
            return Ok(id);
        }
        self.runtime.block_on(self.client.next(ns))
    }

    /// `count` ids of `ns`, increasing.
    pub fn next_batch(&self, ns: &str, count: u64) -> Result<Vec<Id>, ClientError> {
        self.runtime.block_on(self.client.next_batch(ns, count))
    }

    /// `count` ids of one shard of `ns` ([`Client::next_routed`]).
    pub fn next_routed(
        &self,
        ns: &str,
        count: u64,
        route: ShardRoute,
    ) -> Result<Vec<Id>, ClientError> {
        self.runtime
            .block_on(self.client.next_routed(ns, count, route))
    }

    /// The handle of `ns` (set up on first use), with its blocking calls.
    pub fn namespace(&self, ns: &str) -> Result<BlockingNamespace, ClientError> {
        let namespace = self.runtime.block_on(self.client.namespace(ns))?;
        Ok(BlockingNamespace {
            runtime: self.runtime.clone(),
            namespace,
        })
    }

    /// The state of `ns`, if it was set up.
    pub fn stats(&self, ns: &str) -> Option<NamespaceStats> {
        self.client.stats(ns)
    }

    /// Closes the client ([`Client::close`]).
    pub fn close(&self) -> Result<CloseReport, ClientError> {
        Ok(self.runtime.block_on(self.client.close()))
    }

    /// The async client inside, for code that has both.
    pub fn as_async(&self) -> &Client {
        &self.client
    }
}

/// One namespace of a [`BlockingClient`]: [`Namespace`] with blocking waits.
#[derive(Debug, Clone)]
pub struct BlockingNamespace {
    runtime: Arc<Runtime>,
    namespace: Namespace,
}

impl BlockingNamespace {
    /// The next id if one is buffered, without blocking ([`Namespace::try_next`]).
    #[inline]
    pub fn try_next(&self) -> Option<Id> {
        self.namespace.try_next()
    }

    /// A handle for one owner that takes chunks of ids ([`Namespace::local`]).
    pub fn local(&self) -> BlockingLocalIds {
        BlockingLocalIds {
            runtime: self.runtime.clone(),
            ids: self.namespace.local(),
        }
    }

    /// The next id; blocks only when none is buffered.
    pub fn next(&self) -> Result<Id, ClientError> {
        if let Some(id) = self.namespace.try_next() {
            return Ok(id);
        }
        self.runtime.block_on(self.namespace.next())
    }

    /// `count` ids, increasing.
    pub fn next_batch(&self, count: u64) -> Result<Vec<Id>, ClientError> {
        self.runtime.block_on(self.namespace.next_batch(count))
    }

    /// A snapshot of the namespace's state.
    pub fn stats(&self) -> NamespaceStats {
        self.namespace.stats()
    }
}

/// [`LocalIds`] with blocking waits, from [`BlockingNamespace::local`].
#[derive(Debug)]
pub struct BlockingLocalIds {
    runtime: Arc<Runtime>,
    ids: LocalIds,
}

impl BlockingLocalIds {
    /// The next id if one is at hand, without blocking ([`LocalIds::try_next`]).
    #[inline]
    pub fn try_next(&mut self) -> Option<Id> {
        self.ids.try_next()
    }

    /// The next id; blocks only when none is buffered.
    // The client's name for this call everywhere; not an `Iterator` (it fails, and waits).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Id, ClientError> {
        if let Some(id) = self.ids.try_next() {
            return Ok(id);
        }
        self.runtime.block_on(self.ids.next())
    }

    /// Ids held in the current chunk.
    pub fn held(&self) -> u64 {
        self.ids.held()
    }
}
