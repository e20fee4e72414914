//! The node: the set of namespaces being served, their background tasks, the operations every
//! front-end calls ([`requests`]: the one request path), and shutdown.
//!
//! Namespaces live in a map behind a `std::sync::RwLock` that is only read on the request path
//! (a clone of an `Arc`) and written when a namespace is first used; creation itself, which talks
//! to the authority, is serialised by an async mutex so two first requests create a namespace
//! once. No std lock is held across `.await`.
//!
//! Reads never write: [`Node::namespace`], which may create a namespace in the authority and
//! reserve its first block, is for requests of ids and blocks only; reads (`info`, `decode`) go
//! through [`Node::read_namespace`], which answers from the served namespace or from the
//! authority's stored state and never installs, creates or reserves anything.
//!
//! Creation on first use is bounded: at most `server.max_namespaces` namespaces are set up by
//! auto-create (each holds a buffer and a refill task, and a new one durably reserves a block);
//! past that, [`IdError::TooManyNamespaces`]. Declared namespaces do not count toward the bound
//! and are always served; the listing marks auto-created ones (`auto_created`). Members of a
//! family (`[namespaces."NAME.*"]`, [`crate::config::Family`]) are created on first use with
//! the family's settings, bounded by its `max_members` ([`IdError::TooManyMembers`]), and
//! listed with their `family`.
//!
//! Shutdown order matters for uniqueness: stop the refill tasks and wait for them (an in-flight
//! reservation completes and lands in the buffer), then hand back each buffer's unused tail.
//!
//! Modules: [`namespaces`] (looking namespaces up, creating them on first use, reads that never
//! create), [`requests`] (the operations: authenticate, authorize, limit, look up, carry out,
//! count), [`readiness`] (whether every declared namespace can serve now), [`scrape`] (`/metrics`), [`leases`] (worker
//! leases for a lower tier).

mod kept;
pub mod leases;
mod namespaces;
pub mod readiness;
pub mod requests;
mod scrape;

use crate::auth::{Auth, Buckets};
use crate::config::{KindConfig, NodeConfig};
use crate::error::{IdError, NodeError};
use crate::metrics::Metrics;
use crate::namespace::Namespace;
use crate::server::shutdown::{Shutdown, Stage};
use crate::time::{SharedClock, TokioClock};
use crate::worker::LeasedWorker;
use idmint_core::{Backoff, Clock, NamespaceName};
use idmint_store::kept::KeptNamespace;
use idmint_store::{Authority, BlockSource, StoreError};
use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::watch;

use tokio::task::JoinHandle;

/// The first and the longest wait between tries to set up a declared namespace whose
/// authority did not answer at start.
const SET_UP_RETRY_FIRST: Duration = Duration::from_millis(200);
const SET_UP_RETRY_CAP: Duration = Duration::from_secs(5);

/// How often a node with `server.audit_retention_days` prunes its authority's audit ledger.
const AUDIT_PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// A namespace this node serves, with the rate-quota buckets of the tokens that took from it.
#[derive(Debug, Clone)]
pub(crate) struct Served {
    pub(crate) ns: Arc<Namespace>,
    pub(crate) buckets: Arc<Buckets>,
}

/// What a graceful shutdown did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Ids handed back to the authority.
    pub given_back: u64,
    /// Ids burned (buffered but neither served, returned nor kept).
    pub burned: u64,
    /// Ids kept in the data directory, to be served first after the restart
    /// ([`NodeConfig::keep_blocks`]).
    pub kept: u64,
}

/// A running node. Create with [`Node::start`], serve with [`crate::Server`].
#[derive(Debug)]
pub struct Node {
    config: NodeConfig,
    authority: Arc<dyn Authority>,
    clock: SharedClock,
    metrics: Arc<Metrics>,
    namespaces: RwLock<HashMap<NamespaceName, Served>>,
    /// The worker lease of each snowflake lease group served; written under `creating` or at
    /// start only.
    workers: Mutex<HashMap<NamespaceName, Arc<LeasedWorker>>>,
    creating: tokio::sync::Mutex<()>,
    /// Namespaces set up by auto-create; written under `creating` only.
    auto_created: AtomicUsize,
    /// Stops the background tasks (the node's shutdown, once every connection is gone).
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The stages every front-end and the readiness probe watch.
    shutdown: Shutdown,
    /// The clock's monotonic reading when the node started, for [`Node::uptime`].
    started: u64,
    /// Tokens, scopes and quotas (`[auth]`), which every request is checked against.
    auth: Auth,
    /// The state the RESP connections share (their counters, their number).
    resp: crate::resp::Shared,
    /// Permits of the streams open at once (`server.max_streams`).
    streams: Arc<tokio::sync::Semaphore>,
    /// The channels to the other nodes, for forwards (`[peers]`).
    peers: Option<Arc<crate::peers::Peers>>,
    /// Blocks kept at the last clean stop, parked in the authority, whose namespace was not
    /// set up yet: claimed at its set-up (`kept.rs`).
    pending_claims: Mutex<Vec<KeptNamespace>>,
}

impl Node {
    /// [`Node::start_with_clock`] with a [`TokioClock`]: monotonic time follows tokio's, so a
    /// paused test runtime controls the node entirely.
    pub async fn start(
        config: NodeConfig,
        authority: Arc<dyn Authority>,
    ) -> Result<Arc<Node>, NodeError> {
        Self::start_with_clock(config, authority, Arc::new(TokioClock::new())).await
    }

    /// Sets up every declared namespace (creating sequence namespaces in the authority, checking
    /// the stored settings match) and starts their background tasks. A namespace whose
    /// authority does not answer is set up later (the node starts unready and retries); any
    /// other failure is an error. `clock` measures demand
    /// and dates projections. Must run inside a tokio runtime.
    pub async fn start_with_clock(
        config: NodeConfig,
        authority: Arc<dyn Authority>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Node>, NodeError> {
        let (stop, _) = watch::channel(false);
        let started = clock.monotonic_nanos();
        let metrics = Arc::new(Metrics::new());
        let auth = Auth::new(config.auth.clone(), clock.clone(), metrics.clone());
        let metrics_for_resp = metrics.clone();
        let max_streams = config.listen.max_streams;
        let peers = match &config.peers {
            Some(peers) => Some(Arc::new(
                crate::peers::Peers::new(peers).map_err(NodeError::Peers)?,
            )),
            None => None,
        };
        let node = Arc::new(Node {
            config,
            authority,
            clock: SharedClock(clock),
            metrics,
            namespaces: RwLock::new(HashMap::new()),
            workers: Mutex::new(HashMap::new()),
            creating: tokio::sync::Mutex::new(()),
            auto_created: AtomicUsize::new(0),
            stop,
            tasks: Mutex::new(Vec::new()),
            shutdown: Shutdown::new(),
            started,
            auth,
            resp: crate::resp::Shared::new(&metrics_for_resp),
            streams: Arc::new(tokio::sync::Semaphore::new(max_streams)),
            peers,
            pending_claims: Mutex::new(Vec::new()),
        });
        let declared: Vec<(NamespaceName, KindConfig)> = node
            .config
            .namespaces
            .iter()
            .map(|(n, k)| (n.clone(), k.clone()))
            .collect();
        if let Some(keep) = node.config.keep_blocks.clone() {
            node.take_kept(keep).await?;
        }
        let mut pending = Vec::new();
        for (name, kind) in declared {
            if node.lookup(&name).is_some() {
                continue;
            }
            match node.install(&name, &kind, false).await {
                Ok(_) => {}
                Err(e @ IdError::Unavailable { .. }) => {
                    tracing::warn!(namespace = %name, error = %e, "the authority does not answer: not ready until the namespace is set up, retrying");
                    pending.push((name, kind));
                }
                Err(source) => {
                    return Err(NodeError::Namespace {
                        name: name.to_string(),
                        source,
                    })
                }
            }
        }
        if !pending.is_empty() {
            let task = tokio::spawn(node.clone().set_up_later(pending));
            node.lock_tasks().push(task);
        }
        // Once a second: report snowflake wall-clock steps; sample what each sequence
        // namespace served, for its exhaustion projection.
        let watcher = {
            let node = node.clone();
            let mut stop = node.stop.subscribe();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = stop.changed() => return,
                    }
                    let now = node.clock.monotonic_nanos();
                    for ns in node.all() {
                        match &*ns {
                            Namespace::Snowflake(s) => s.check_clock(),
                            Namespace::Sequence(s) => s.sample_served(now),
                            Namespace::Uuid7(..) | Namespace::Ulid(..) => {}
                        }
                    }
                }
            })
        };
        node.lock_tasks().push(watcher);
        if let Some(retention) = node.config.audit_retention {
            let pruner = {
                let node = node.clone();
                let mut stop = node.stop.subscribe();
                tokio::spawn(async move {
                    loop {
                        node.prune_audit(retention).await;
                        tokio::select! {
                            _ = tokio::time::sleep(AUDIT_PRUNE_EVERY) => {}
                            _ = stop.changed() => return,
                        }
                    }
                })
            };
            node.lock_tasks().push(pruner);
        }
        Ok(node)
    }

    /// Sets up the declared namespaces the authority could not set up at start, retrying with
    /// a backoff until each is served (a request may set one up first) or the node stops. A
    /// namespace refused for good (its stored settings conflict) is logged and left: its
    /// requests answer why, and the node stays unready.
    async fn set_up_later(self: Arc<Self>, mut pending: Vec<(NamespaceName, KindConfig)>) {
        let mut stop = self.stop.subscribe();
        let mut backoff = Backoff::new(SET_UP_RETRY_FIRST, SET_UP_RETRY_CAP);
        while !pending.is_empty() {
            tokio::select! {
                _ = tokio::time::sleep(backoff.delay()) => {}
                _ = stop.changed() => return,
            }
            let mut still = Vec::new();
            for (name, kind) in pending {
                match self.set_up_declared(&name, &kind).await {
                    Ok(_) => {}
                    Err(IdError::Unavailable { .. }) => still.push((name, kind)),
                    Err(IdError::ShuttingDown) => return,
                    Err(e) => {
                        tracing::error!(namespace = %name, error = %e, "the declared namespace cannot be set up; not serving it")
                    }
                }
            }
            pending = still;
        }
    }

    /// Prunes the audit ledger to `retention`, measured by the store's clock, never this
    /// node's ([`idmint_store::audit::prune`]: old entries fold into a checkpoint), on the
    /// authority or each connected member of a multi authority; logs what it did. What the
    /// hourly task of `server.audit_retention_days` runs.
    pub async fn prune_audit(&self, retention: Duration) {
        let authorities = self
            .authority
            .members()
            .map(|m| {
                m.audited()
                    .into_iter()
                    .filter_map(|m| m.ledger.ok())
                    .collect()
            })
            .unwrap_or_else(|| vec![self.authority.clone()]);
        for a in authorities {
            let Some(log) = a.audit_log() else { continue };
            match idmint_store::audit::prune(log, retention).await {
                Ok(pruned) => {
                    if pruned.removed > 0 {
                        tracing::info!(
                            authority = a.kind(),
                            removed = pruned.removed,
                            checkpoints = pruned.checkpoints,
                            "audit ledger entries older than the retention folded into checkpoints"
                        );
                    }
                    for v in &pruned.kept {
                        tracing::error!(authority = a.kind(), violation = %v, "audit ledger entries kept unpruned: they show a violation");
                    }
                }
                Err(e) => {
                    tracing::warn!(authority = a.kind(), error = %e, "could not prune the audit ledger; trying again in an hour")
                }
            }
        }
    }

    fn lock_tasks(&self) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Authentication, scopes and quotas.
    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// The settings.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }
    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
    /// The authority.
    pub fn authority(&self) -> &Arc<dyn Authority> {
        &self.authority
    }
    /// Wall time now, by the node's clock.
    pub fn now(&self) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + Duration::from_nanos(self.clock.wall_nanos())
    }
    /// How long the node has run, by its monotonic clock.
    pub fn uptime(&self) -> Duration {
        Duration::from_nanos(self.clock.monotonic_nanos().saturating_sub(self.started))
    }
    /// Whether shutdown has begun (`/readyz` answers 503, no namespace is created).
    pub fn is_draining(&self) -> bool {
        self.shutdown.is_draining()
    }

    /// The state the RESP connections share.
    pub(crate) fn resp_state(&self) -> &crate::resp::Shared {
        &self.resp
    }

    /// A permit for one more open stream, or `TooManyStreams`.
    pub(crate) fn stream_permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, IdError> {
        self.streams
            .clone()
            .try_acquire_owned()
            .map_err(|_| IdError::TooManyStreams(self.config.listen.max_streams))
    }

    /// The node's shutdown stages: [`Shutdown::drain`] on a first signal,
    /// [`Shutdown::stop_now`] on a second; the server and every connection watch them.
    pub fn shutdown_handle(&self) -> &Shutdown {
        &self.shutdown
    }

    /// Every namespace served so far, sorted by name.
    pub fn all(&self) -> Vec<Arc<Namespace>> {
        let map = self.namespaces.read().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = map.values().map(|s| s.ns.clone()).collect();
        v.sort_by(|a, b| a.name().cmp(b.name()));
        v
    }

    /// Moves a sequence namespace's watermark up (`idmint admin rebase`: so that every id from
    /// now on is above `above`; `idmint admin retire`: past its largest id, so it hands out
    /// nothing more), recorded in the authority's audit ledger, and burns the ids this node
    /// holds buffered below the new watermark. Forward-only and repeatable: a watermark already
    /// there is left as it is. Sets the namespace up first if this node would on first use.
    ///
    /// Other nodes sharing the authority serve what they already buffered until their buffers
    /// run dry (ids granted before the move: unique, but below the new watermark); the docs say
    /// to stop or drain them for an import.
    pub async fn advance(
        &self,
        name: &str,
        action: idmint_store::Advance,
        above: Option<u64>,
    ) -> Result<idmint_api::AdvanceResponse, IdError> {
        let ns = self.namespace(name).await?.ns;
        let Namespace::Sequence(seq) = &*ns else {
            return Err(IdError::WrongKind(format!(
                "namespace {name:?} is a {} namespace; only sequence namespaces have a \
                 watermark to move",
                ns.kind()
            )));
        };
        let spec = seq.spec();
        let ceiling = spec.width().max_id() + 1; // max_id is at most 2^63 - 1
        let (to, verb) = match (action, above) {
            (idmint_store::Advance::Retire, _) => (ceiling, "retire"),
            (idmint_store::Advance::Rebase, Some(above)) if above < spec.width().max_id() => {
                (above + 1, "rebase")
            }
            (idmint_store::Advance::Rebase, Some(above)) => {
                return Err(IdError::InvalidRequest(format!(
                    "above = {above} leaves no id of the {}-bit namespace {name:?} (its largest \
                     id is {}); to stop it for good, retire it",
                    spec.width().bits(),
                    spec.width().max_id()
                )))
            }
            (idmint_store::Advance::Rebase, None) => {
                return Err(IdError::InvalidRequest(
                    "a rebase needs above=N: the highest id that must never be handed out".into(),
                ))
            }
        };
        let advanced = self
            .authority
            .advance(ns.name(), to, action)
            .await
            .map_err(|e| match e {
                StoreError::UnknownNamespace { name } => {
                    IdError::UnknownNamespace(name.to_string())
                }
                StoreError::NotSupported { .. } => {
                    IdError::Conflict(format!("{e}: move the watermark on the tier that owns it"))
                }
                other => authority_error(name, other),
            })?;
        let retired = advanced.state.retired;
        let burned = seq.supply().advanced(to, retired);
        tracing::warn!(namespace = %name, action = verb, from = advanced.from,
            watermark = advanced.state.watermark, burned, "watermark moved by an operator");
        Ok(idmint_api::AdvanceResponse {
            namespace: name.to_string(),
            action: verb.to_string(),
            previous_watermark: advanced.from,
            watermark: advanced.state.watermark,
            burned,
            retired,
        })
    }

    /// The state of each member of a multi authority (empty for a single authority).
    pub fn members(&self) -> Vec<idmint_api::MemberState> {
        self.authority
            .members()
            .map_or_else(Vec::new, |m| m.health())
            .into_iter()
            .map(|m| idmint_api::MemberState {
                number: m.number,
                kind: m.kind.to_owned(),
                offset: m.offset,
                up: m.up,
                last_error: if m.up { None } else { m.last_error },
                out_of_service: m.out_of_service,
            })
            .collect()
    }

    /// A namespace's settings and state as of now, with the authority's members (which own
    /// its residue classes) for a sequence namespace on a multi authority, and the family it
    /// is a member of.
    pub fn describe(&self, info: idmint_api::NamespaceInfo) -> idmint_api::NamespaceInfo {
        match info {
            idmint_api::NamespaceInfo::Sequence {
                namespace,
                auto_created,
                settings,
                mut state,
                ..
            } => {
                state.members = self.members();
                let family = NamespaceName::new(&namespace)
                    .ok()
                    .and_then(|name| self.config.family_of(&name))
                    .map(|f| f.pattern.to_string());
                idmint_api::NamespaceInfo::Sequence {
                    namespace,
                    auto_created,
                    family,
                    settings,
                    state,
                }
            }
            other => other,
        }
    }

    /// Stops the background tasks, waits for them, and hands back every sequence buffer's
    /// unused tail. Call once every connection is gone ([`crate::Server::serve`] does).
    pub async fn shutdown(&self) -> ShutdownReport {
        self.shutdown.drain();
        self.shutdown.stopped();
        debug_assert!(self.shutdown.stage() == Stage::Stopped);
        self.stop.send_replace(true);
        let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *self.lock_tasks());
        for t in tasks {
            if let Err(e) = t.await {
                tracing::error!(error = %e, "a background task failed");
            }
        }
        let workers: Vec<Arc<LeasedWorker>> = self
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for w in workers {
            w.release().await;
        }
        for ns in self.all() {
            if let Some(shards) = ns.owned_shards() {
                shards.release().await;
            }
        }
        let mut report = ShutdownReport::default();
        let keep = self.keeps_blocks();
        let mut kept = Vec::new();
        for ns in self.all() {
            if let Namespace::Sequence(s) = &*ns {
                // A strict namespace's blocks are never kept: a later leader may serve above
                // them while this node is down.
                let keeps = keep && s.strict_order().is_none();
                let done = s.supply().give_back(keeps).await;
                if let Some(strict) = s.strict_order() {
                    strict.release().await;
                }
                report.given_back += done.given_back;
                report.burned += done.burned;
                if !done.kept.is_empty() {
                    kept.push(KeptNamespace {
                        name: s.supply().name().clone(),
                        spec: s.spec(),
                        blocks: done.kept,
                        claim: None,
                    });
                }
            }
        }
        if keep {
            self.keep_unused(kept, &mut report).await;
        }
        if let Err(e) = self.authority.flush().await {
            tracing::warn!(error = %e, "the authority could not write what it held at shutdown");
        }
        report
    }
}

/// The domain error of an authority's failure on namespace `name`: a lost namespace as such,
/// anything else as unavailable (the caller maps the errors that mean more first).
fn authority_error(name: &str, e: StoreError) -> IdError {
    match e {
        StoreError::Lost { .. } | StoreError::StoreLost { .. } => IdError::Lost {
            name: name.to_string(),
            reason: e.to_string(),
        },
        StoreError::Retired { .. } => IdError::Retired(name.to_string()),
        other => IdError::Unavailable {
            name: name.to_string(),
            reason: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::config::KeepBlocks;
    use crate::namespace::Ids;
    use idmint_api::NamespaceInfo;
    use idmint_core::SequenceSpec;
    use idmint_store::kept;
    use idmint_store::MemoryAuthority;

    fn name(s: &str) -> NamespaceName {
        NamespaceName::new(s).unwrap()
    }

    fn auto_created(ns: &Namespace) -> bool {
        match ns.info(std::time::UNIX_EPOCH) {
            NamespaceInfo::Sequence { auto_created, .. } => auto_created,
            other => panic!("not a sequence: {other:?}"),
        }
    }

    /// Past `max_namespaces` auto-created namespaces, a new name is refused with
    /// `too_many_namespaces`; those already served keep serving, declared ones do not count,
    /// and listings tell the auto-created ones apart.
    #[tokio::test]
    async fn auto_create_stops_at_max_namespaces() {
        let mut config = NodeConfig {
            max_namespaces: 2,
            ..NodeConfig::default()
        };
        let (spec, cache) = config.default_sequence;
        config.namespaces.insert(
            name("declared"),
            KindConfig::Sequence {
                spec,
                cache,
                order: Default::default(),
            },
        );
        config
            .namespaces
            .insert(name("sessions"), KindConfig::Uuid7);
        let node = Node::start(config, Arc::new(MemoryAuthority::new()))
            .await
            .unwrap();
        let a = node.namespace("a").await.unwrap().ns;
        node.namespace("b").await.unwrap();
        assert_eq!(node.auto_created_count(), 2);
        let refused = node.namespace("c").await.unwrap_err();
        assert_eq!(
            refused,
            IdError::TooManyNamespaces {
                name: "c".into(),
                limit: 2
            }
        );
        assert_eq!(refused.code(), idmint_api::ErrorCode::TooManyNamespaces);
        let message = refused.to_string();
        assert!(message.contains("server.max_namespaces"), "{message}");
        // Nothing of "c" was installed; served and declared namespaces still answer.
        assert_eq!(node.all().len(), 4);
        assert_eq!(a.ids(3).await.unwrap().len(), 3);
        assert!(node.namespace("a").await.is_ok());
        assert!(node.namespace("declared").await.is_ok());
        assert!(auto_created(&a));
        assert!(!auto_created(&node.namespace("declared").await.unwrap().ns));
        node.shutdown().await;
    }

    /// An auto-created namespace keeps the spec stored by an earlier run,
    /// which may be a small 32-bit one; its blocks are lowered to that spec's cap rather than
    /// the `[defaults]` sizes (here 10,000,000 ids: more than the whole namespace).
    #[tokio::test]
    async fn a_stored_small_spec_gets_blocks_within_its_cap() {
        let authority: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
        let small = SequenceSpec::new(idmint_core::Width::Bits32, 2_000_000_000, 1, 0).unwrap();
        authority
            .ensure_namespace(&name("small"), small)
            .await
            .unwrap();
        let config =
            crate::FileConfig::parse("[defaults]\ncache = \"fixed\"\nblock_size = 10000000\n")
                .unwrap()
                .node;
        let node = Node::start(config, authority.clone()).await.unwrap();
        let ns = node.namespace("small").await.unwrap().ns;
        assert_eq!(ns.ids(1).await.unwrap().len(), 1);
        let cap = crate::config::block_cap(&small);
        assert_eq!(cap, 144_027);
        let reserved = authority
            .state(&name("small"))
            .await
            .unwrap()
            .unwrap()
            .watermark
            - small.first();
        assert!(reserved <= 2 * cap, "reserved {reserved}, cap {cap}");
        node.shutdown().await;
    }

    /// A clean stop keeps in the data directory what the authority does not take back (here:
    /// another node reserved after this one, so its tail is refused), and the next start
    /// serves the kept ids first, then continues from the authority: every id once, in order
    /// per node, none burned.
    #[tokio::test(start_paused = true)]
    async fn unused_blocks_are_kept_over_a_restart_and_served_first() {
        let dir = tempfile::tempdir().unwrap();
        let authority: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
        let config = |keep: bool| {
            let mut config = crate::FileConfig::parse(
                "[server]\nauto_create = false\n[namespaces.orders]\nkind = \"sequence\"\n\
                 cache = \"fixed\"\nblock_size = 100\n",
            )
            .unwrap()
            .node;
            config.keep_blocks = keep.then(|| KeepBlocks {
                dir: dir.path().to_owned(),
                authority: "memory (test)".into(),
            });
            config
        };
        let ids = |ids: Ids| match ids {
            Ids::U64(v) => v,
            other => panic!("{other:?}"),
        };
        let a = Node::start(config(true), authority.clone()).await.unwrap();
        let a_ns = a.namespace("orders").await.unwrap().ns;
        assert_eq!(
            ids(a_ns.ids(10).await.unwrap()),
            (1..=10).collect::<Vec<_>>()
        );
        let Namespace::Sequence(a_seq) = &*a_ns else {
            panic!("not a sequence")
        };
        let held = a_seq.supply().snapshot().buffered;
        let b = Node::start(config(false), authority.clone()).await.unwrap();
        let b_first = ids(b
            .namespace("orders")
            .await
            .unwrap()
            .ns
            .ids(1)
            .await
            .unwrap())[0];
        assert_eq!(b_first, 11 + held, "B's block follows A's");

        let report = a.shutdown().await;
        assert_eq!(
            (report.given_back, report.kept, report.burned),
            (0, held, 0),
            "{report:?}"
        );
        assert!(dir.path().join(kept::KEPT_FILE).exists());

        let watermark = authority
            .state(&name("orders"))
            .await
            .unwrap()
            .unwrap()
            .watermark;
        let a = Node::start(config(true), authority.clone()).await.unwrap();
        // Read (and removed) before anything was served.
        assert!(!dir.path().join(kept::KEPT_FILE).exists());
        let ns = a.namespace("orders").await.unwrap().ns;
        assert_eq!(
            ids(ns.ids(held).await.unwrap()),
            (11..11 + held).collect::<Vec<_>>()
        );
        assert_eq!(
            ids(ns.ids(5).await.unwrap()),
            (watermark..watermark + 5).collect::<Vec<_>>()
        );
        a.shutdown().await;
        b.shutdown().await;
    }

    /// Kept blocks of a namespace the node no longer serves with the same settings are not
    /// served (burned), and the file is still consumed.
    #[tokio::test(start_paused = true)]
    async fn kept_blocks_of_a_changed_namespace_are_not_served() {
        let dir = tempfile::tempdir().unwrap();
        let spec = SequenceSpec::default_64();
        kept::write(
            dir.path(),
            "a",
            &[KeptNamespace {
                name: name("orders"),
                spec,
                blocks: vec![idmint_core::Block::new(1, 101, 1).unwrap()],
                claim: Some(idmint_store::ClaimKey::random()),
            }],
        )
        .unwrap();
        let mut config = NodeConfig {
            auto_create: false,
            ..NodeConfig::default()
        };
        let (_, cache) = config.default_sequence;
        let other = SequenceSpec::new(idmint_core::Width::Bits64, 1, 2, 1).unwrap();
        config.namespaces.insert(
            name("orders"),
            KindConfig::Sequence {
                spec: other,
                cache,
                order: Default::default(),
            },
        );
        config.keep_blocks = Some(KeepBlocks {
            dir: dir.path().to_owned(),
            authority: "a".into(),
        });
        let node = Node::start(config, Arc::new(MemoryAuthority::new()))
            .await
            .unwrap();
        assert!(!dir.path().join(kept::KEPT_FILE).exists());
        let ids = node
            .namespace("orders")
            .await
            .unwrap()
            .ns
            .ids(3)
            .await
            .unwrap();
        assert_eq!(
            ids,
            Ids::U64(vec![1, 3, 5]),
            "from the authority, with the configured spec"
        );
        node.shutdown().await;
    }

    /// A declared namespace that cannot be set up names itself once in the error, not as
    /// "namespace e: namespace e …".
    #[tokio::test]
    async fn a_failed_declared_namespace_is_named_once() {
        let authority: Arc<dyn Authority> = Arc::new(MemoryAuthority::new());
        authority
            .ensure_namespace(&name("e"), SequenceSpec::default_64())
            .await
            .unwrap();
        let mut config = NodeConfig::default();
        let (_, cache) = config.default_sequence;
        let other = SequenceSpec::new(idmint_core::Width::Bits64, 1, 2, 1).unwrap();
        config.namespaces.insert(
            name("e"),
            KindConfig::Sequence {
                spec: other,
                cache,
                order: Default::default(),
            },
        );
        let err = Node::start(config, authority).await.unwrap_err();
        let message = err.to_string();
        assert_eq!(message.matches("namespace e").count(), 1, "{message}");
        assert!(message.contains("exists with"), "{message}");
    }
}
