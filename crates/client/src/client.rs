//! [`Client`]: connects to nodes, sets namespaces up on first use, runs their refill tasks, and
//! closes cleanly.
//!
//! Setting a namespace up reads it on the node (`Namespace`, a read that creates nothing). A
//! namespace the node does not have yet is created the only way the API allows, a `Block`
//! (the node must have `auto_create` on, else [`ClientError::UnknownNamespace`]); that block
//! is the buffer's first, never thrown away. Each namespace then gets one refill task.
//!
//! `close` (design.md invariants 2 and 3): marks every namespace closed (no id is handed out
//! after), stops the refill tasks and waits for them (a block in flight lands first), then hands
//! each sequence namespace's unused tail back to the node that leased it, with the lease, so a
//! clean stop burns nothing. A client dropped without `close` aborts its tasks; what it held is
//! burned, as after a crash, never served again.

use crate::config::ClientConfig;
use crate::error::ClientError;
use crate::id::{Id, Kind};
use crate::local_snowflake::{LocalSnowflake, LocalSnowflakeConfig};
use crate::namespace::{refill_loop, Ids, Namespace, NamespaceStats, State};
use crate::nodes::{CallError, IntoClientError, Nodes};
use crate::sequence::{SequenceIds, SpecCheck};
use crate::shard::ShardRoute;
use crate::shard_map::ShardMaps;
use crate::timed::TimedIds;
use idmint_core::{Buffer, Clock, NamespaceName, SystemClock};
use idmint_proto::v1 as proto;
use proto::namespace_info::Kind as InfoKind;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// An idmint client: per-namespace buffers leased from nodes. Cheap to clone (shared).
///
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # // A node in process: the file store in a temporary directory, gRPC on 127.0.0.1:0.
/// # let dir = tempfile::tempdir()?;
/// # let authority = std::sync::Arc::new(idmint_store::FileAuthority::open(dir.path())?);
/// # let node = idmint_node::Node::start(idmint_node::NodeConfig::default(), authority).await?;
/// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// # let url = format!("http://{}", listener.local_addr()?);
/// # let server = idmint_node::Server::new(node).grpc(listener);
/// # let shutdown = server.shutdown_handle();
/// # let served = tokio::spawn(server.serve());
/// use idmint_client::Client;
///
/// let client = Client::connect([url]).await?;
/// let a = client.next("photos").await?;
/// let b = client.next("photos").await?;
/// assert!(b > a);
/// let batch = client.next_batch("photos", 1000).await?;
/// assert!(batch[0] > b && batch.len() == 1000);
///
/// // The hot path: a handle, and a take that never waits on the network.
/// let photos = client.namespace("photos").await?;
/// let c = match photos.try_next() {
///     Some(id) => id,
///     None => photos.next().await?, // the buffer was empty: wait for a refill
/// };
/// assert!(c > batch[999]);
/// println!("{:?}", photos.stats());
///
/// // The unused tail of the newest block goes back to the node; the end of an older block
/// // still buffered (refills run ahead) cannot and is burned.
/// let report = client.close().await;
/// println!("given back {}, burned {}", report.given_back, report.burned);
/// # shutdown.drain();
/// # served.await??;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    nodes: Arc<Nodes>,
    /// Where each shard-owned namespace's ranges are held (`shard_map.rs`).
    shard_maps: Arc<ShardMaps>,
    config: Arc<ClientConfig>,
    clock: crate::config::SharedClock,
    /// Set up namespaces. A std lock: held for a lookup or an insert, never across `.await`.
    namespaces: RwLock<HashMap<String, Namespace>>,
    /// Serialises setting namespaces up, so each is set up once.
    creating: tokio::sync::Mutex<()>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    stop: watch::Sender<bool>,
    closed: AtomicBool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in self
            .tasks
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            task.abort();
        }
    }
}

/// What [`Client::close`] did with the ids still buffered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CloseReport {
    /// Sequence ids handed back to the nodes (they will be handed out by the node next).
    pub given_back: u64,
    /// Ids that will never be handed out by anyone: older unused blocks, tails a node refused
    /// or whose answer was lost, time-ordered ids cached.
    pub burned: u64,
}

impl Client {
    /// A client of the nodes at `urls` (`http://host:port` of their gRPC front-ends) with the
    /// default [`ClientConfig`]. Succeeds once one node answers.
    pub async fn connect<I, S>(urls: I) -> Result<Client, ClientError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::connect_with(ClientConfig::new(urls), Arc::new(SystemClock::new())).await
    }

    /// A client with `config`, reading time from `clock` (the validity limit of time-ordered
    /// ids and the demand average). Succeeds once one node answers.
    pub async fn connect_with(
        config: ClientConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Client, ClientError> {
        config.check()?;
        let nodes = crate::nodes::connect(
            &config.urls,
            config.op_timeout,
            config.token.as_ref(),
            config.tls.as_ref(),
        )?;
        nodes
            .call(|mut c| async move { c.namespaces(proto::NamespacesRequest {}).await })
            .await
            .map_err(|e| e.into_client_error(""))?;
        let (stop, _) = watch::channel(false);
        let nodes = Arc::new(nodes);
        let clock = crate::config::SharedClock(clock);
        let shard_maps = Arc::new(ShardMaps::new(
            nodes.clone(),
            clock.clone(),
            config.shard_map_refresh,
        ));
        Ok(Client {
            inner: Arc::new(Inner {
                nodes,
                shard_maps,
                config: Arc::new(config),
                clock,
                namespaces: RwLock::new(HashMap::new()),
                creating: tokio::sync::Mutex::new(()),
                tasks: Mutex::new(Vec::new()),
                stop,
                closed: AtomicBool::new(false),
            }),
        })
    }

    /// The next id of namespace `ns`, waiting for a refill only when none is buffered.
    pub async fn next(&self, ns: &str) -> Result<Id, ClientError> {
        if let Some(id) = self.try_next(ns) {
            return Ok(id);
        }
        self.namespace(ns).await?.next().await
    }

    /// `count` ids of `ns` (1 to 10,000,000), increasing.
    pub async fn next_batch(&self, ns: &str, count: u64) -> Result<Vec<Id>, ClientError> {
        self.namespace(ns).await?.next_batch(count).await
    }

    /// `count` ids (1 to 10,000,000) of one shard of `ns`, a snowflake namespace with
    /// `shards = "owned"`: the shard `route` names, or its key's. Fetched from a node on every
    /// call, never buffered (see [`ShardRoute`]). With several nodes, the request goes first to
    /// the node holding the shard's range, from the namespace's shard map (learned from the
    /// nodes, refreshed every [`ClientConfig::shard_map_refresh`]), else in the usual order.
    /// A namespace that does not take a shard
    /// answers [`ClientError::Rejected`] with code `invalid_request`.
    pub async fn next_routed(
        &self,
        ns: &str,
        count: u64,
        route: ShardRoute,
    ) -> Result<Vec<Id>, ClientError> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(ClientError::Closed);
        }
        let inner = &self.inner;
        crate::shard::next_routed(&inner.nodes, &inner.shard_maps, ns, count, route).await
    }

    /// The next id of `ns` if one is buffered; `None` without waiting if not, or if `ns` was
    /// not set up yet (use [`Client::namespace`] first).
    pub fn try_next(&self, ns: &str) -> Option<Id> {
        self.inner
            .namespaces
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(ns)?
            .try_next()
    }

    /// The state of `ns` on this client, if it was set up.
    pub fn stats(&self, ns: &str) -> Option<NamespaceStats> {
        self.lookup(ns).map(|n| n.stats())
    }

    fn lookup(&self, ns: &str) -> Option<Namespace> {
        self.inner
            .namespaces
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(ns)
            .cloned()
    }

    /// The handle of namespace `ns`, setting it up on first use (see the module docs).
    pub async fn namespace(&self, ns: &str) -> Result<Namespace, ClientError> {
        if let Some(n) = self.lookup(ns) {
            return Ok(n);
        }
        let name = NamespaceName::new(ns)?;
        let _creating = self.inner.creating.lock().await;
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(ClientError::Closed);
        }
        if let Some(n) = self.lookup(ns) {
            return Ok(n);
        }
        let namespace = self.set_up(name.as_str()).await?;
        let task = tokio::spawn(refill_loop(
            namespace.state.clone(),
            self.inner.stop.subscribe(),
        ));
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task);
        self.inner
            .namespaces
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(ns.to_owned(), namespace.clone());
        namespace.state.wake.notify_one();
        Ok(namespace)
    }

    /// Reads `ns` on the nodes (creating a sequence namespace with a first `Block` if absent)
    /// and builds its state.
    async fn set_up(&self, ns: &str) -> Result<Namespace, ClientError> {
        let nodes = &self.inner.nodes;
        let mut first = None;
        let info = match self.info(ns).await? {
            Some(info) => info,
            None => {
                let request = proto::BlockRequest {
                    namespace: ns.to_owned(),
                    count: Some(Buffer::new(self.inner.config.buffer).target_block()),
                    min_start: None,
                    extends: None,
                };
                let (node, leased) = nodes
                    .call(|mut c| {
                        let request = request.clone();
                        async move { c.block(request).await }
                    })
                    .await
                    .map_err(|e| e.into_client_error(ns))?;
                first = Some((node, leased));
                self.info(ns)
                    .await?
                    .ok_or_else(|| ClientError::UnknownNamespace {
                        namespace: ns.to_owned(),
                    })?
            }
        };
        let config = &self.inner.config;
        let validity = u64::try_from(config.validity.as_nanos()).unwrap_or(u64::MAX);
        let ids = match info.kind {
            Some(InfoKind::Sequence(seq)) => {
                let settings = seq
                    .settings
                    .ok_or_else(|| ClientError::node("the node described no settings"))?;
                let check = SpecCheck::from_settings(&settings)?;
                let ids = SequenceIds::new(config.buffer, check.clone());
                if let Some((node, leased)) = first {
                    let block = check.block(&leased)?;
                    ids.first_block(block, leased.lease, node);
                }
                Ids::Sequence(ids)
            }
            Some(InfoKind::Snowflake(_)) => Ids::Timed(TimedIds::new(
                Kind::Snowflake,
                validity,
                config.max_time_batch,
            )),
            Some(InfoKind::Uuid7(_)) => {
                Ids::Timed(TimedIds::new(Kind::Uuid7, validity, config.max_time_batch))
            }
            Some(InfoKind::Ulid(_)) => {
                Ids::Timed(TimedIds::new(Kind::Ulid, validity, config.max_time_batch))
            }
            None => return Err(ClientError::node("the node described no kind")),
        };
        Ok(Namespace {
            state: Arc::new(State {
                name: ns.to_owned(),
                ids,
                nodes: nodes.clone(),
                clock: self.inner.clock.clone(),
                config: config.clone(),
                wake: Notify::new(),
                arrived: Notify::new(),
                rounds: AtomicU64::new(0),
                waits: AtomicU64::new(0),
                failures: AtomicU64::new(0),
                last_error: Mutex::new(None),
            }),
        })
    }

    /// A generator of snowflake ids for `ns` made in this process, under a worker id leased
    /// from the namespace's pool through the nodes (gRPC `AcquireWorker`; a token needs the
    /// `workers` scope on the namespace's lease group), with the default
    /// [`LocalSnowflakeConfig`]. See [`LocalSnowflake`].
    pub async fn local_snowflake(&self, ns: &str) -> Result<LocalSnowflake, ClientError> {
        self.local_snowflake_with(ns, LocalSnowflakeConfig::default())
            .await
    }

    /// [`Client::local_snowflake`] with `config`.
    pub async fn local_snowflake_with(
        &self,
        ns: &str,
        config: LocalSnowflakeConfig,
    ) -> Result<LocalSnowflake, ClientError> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(ClientError::Closed);
        }
        let name = NamespaceName::new(ns)?;
        let info =
            self.info(name.as_str())
                .await?
                .ok_or_else(|| ClientError::UnknownNamespace {
                    namespace: ns.to_owned(),
                })?;
        let target = crate::local_snowflake::target_of(ns, info)?;
        LocalSnowflake::open(self.inner.nodes.clone(), target, config).await
    }

    /// The node's description of `ns`; `None` if it has none.
    async fn info(&self, ns: &str) -> Result<Option<proto::NamespaceInfo>, ClientError> {
        let request = proto::NamespaceRequest {
            namespace: ns.to_owned(),
        };
        match self
            .inner
            .nodes
            .call(|mut c| {
                let request = request.clone();
                async move { c.namespace(request).await }
            })
            .await
        {
            Ok((_, info)) => Ok(Some(info)),
            Err(CallError::Status(_, s)) if s.code() == tonic::Code::NotFound => Ok(None),
            Err(e) => Err(e.into_client_error(ns)),
        }
    }

    /// Stops the client: no id is handed out after; the refill tasks stop (a block in flight
    /// lands first); each sequence namespace's unused tail goes back to the node that leased it
    /// (`GiveBack` with the lease). Calls after this answer [`ClientError::Closed`]. A second
    /// call does nothing.
    pub async fn close(&self) -> CloseReport {
        let _creating = self.inner.creating.lock().await;
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return CloseReport::default();
        }
        let _ = self.inner.stop.send(true);
        let tasks: Vec<_> = self
            .inner
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
            .collect();
        for task in tasks {
            // A task that panicked has nothing in flight any more.
            let _ = task.await;
        }
        let namespaces: Vec<Namespace> = self
            .inner
            .namespaces
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let mut report = CloseReport::default();
        for ns in namespaces {
            let before = ns.stats();
            match &ns.state.ids {
                Ids::Sequence(s) => {
                    if let Some(tail) = s.begin_close() {
                        s.give_back(&ns.state.name, &self.inner.nodes, tail).await;
                    }
                }
                Ids::Timed(t) => t.close(),
            }
            ns.state.arrived.notify_waiters();
            let after = ns.stats();
            report.given_back += after.given_back - before.given_back;
            report.burned += after.burned - before.burned;
        }
        report
    }
}
