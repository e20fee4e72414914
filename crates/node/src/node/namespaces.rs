//! Namespaces of a node: looked up on every request, created on first use (ids and blocks
//! only), and read without being created.
//!
//! Invariants: a read ([`Node::read_namespace`]) never installs, creates or reserves
//! anything; creation on first use is serialised (two first requests create a namespace once),
//! bounded by `server.max_namespaces` (auto-create) or by its family's `max_members` (a member
//! of a `[namespaces."NAME.*"]` family, created whatever `auto_create` says, with the family's
//! settings only: a stored spec that differs is a conflict, as for a declared namespace),
//! refused once draining began, and an auto-created one keeps a spec the authority already
//! stores. No std lock is held across `.await`.

use super::{authority_error, Node, Served};
use crate::auth::Buckets;
use crate::block_gate::IdSpace;
use crate::config::{CacheMode, Family, KindConfig, Order};
use crate::error::IdError;
use crate::metrics::{NamespaceLabels, SupplyMetrics};
use crate::namespace::{
    Namespace, NamespaceView, SequenceNamespace, SnowflakeNamespace, StoredSequence,
};
use crate::shards::OwnedShards;
use crate::strict::Strict;
use crate::supply::{Supply, SupplyConfig};
use crate::worker::{LeasedWorker, WorkerError};
use idmint_core::{NamespaceName, SequenceSpec, UlidGenerator, Uuid7Generator};
use idmint_store::{BlockSource, StoreError};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Node {
    /// The namespace called `name`, set up on first use (auto-created as a default sequence if
    /// allowed): for requests of ids and blocks only, since setting up reserves a first block.
    /// Reads use [`Node::read_namespace`].
    pub(crate) async fn namespace(&self, name: &str) -> Result<Served, IdError> {
        let name = NamespaceName::new(name)?;
        if let Some(served) = self.lookup(&name) {
            return Ok(served);
        }
        if let Some(kind) = self.config.namespaces.get(&name) {
            return self.set_up_declared(&name, kind).await;
        }
        if let Some(family) = self.config.family_of(&name) {
            return self.set_up_member(&name, family).await;
        }
        if !self.config.auto_create {
            return Err(IdError::UnknownNamespace(name.to_string()));
        }
        if self.is_draining() {
            return Err(IdError::ShuttingDown);
        }
        let _creating = self.creating.lock().await;
        if let Some(served) = self.lookup(&name) {
            return Ok(served);
        }
        let limit = self.config.max_namespaces;
        if self.auto_created.load(Ordering::Relaxed) >= limit {
            return Err(IdError::TooManyNamespaces {
                name: name.to_string(),
                limit,
            });
        }
        // A namespace created earlier (by auto-create) keeps its stored spec.
        let (default_spec, cache) = self.config.default_sequence;
        let spec = match self.authority.state(&name).await {
            Ok(Some(state)) => state.spec,
            Ok(None) => default_spec,
            Err(e) => {
                return Err(IdError::Unavailable {
                    name: name.to_string(),
                    reason: e.to_string(),
                })
            }
        };
        // The sizes were bounded for the default spec; a stored one may hold fewer ids.
        let cache = crate::config::fit_cache(cache, &spec);
        let ns = self
            .install(
                &name,
                &KindConfig::Sequence {
                    spec,
                    cache,
                    order: Order::Writer,
                },
                true,
            )
            .await?;
        self.auto_created.fetch_add(1, Ordering::Relaxed);
        Ok(ns)
    }

    /// A declared namespace that is not served yet (the authority did not answer when the node
    /// started), set up now: by the first request that needs it, or by the task that retries.
    pub(super) async fn set_up_declared(
        &self,
        name: &NamespaceName,
        kind: &KindConfig,
    ) -> Result<Served, IdError> {
        if self.is_draining() {
            return Err(IdError::ShuttingDown);
        }
        let _creating = self.creating.lock().await;
        if let Some(served) = self.lookup(name) {
            return Ok(served);
        }
        self.install(name, kind, false).await
    }

    /// A member of `family` set up on first use, with the family's settings, unless the family
    /// has `max_members` members served already.
    async fn set_up_member(
        &self,
        name: &NamespaceName,
        family: &Family,
    ) -> Result<Served, IdError> {
        if self.is_draining() {
            return Err(IdError::ShuttingDown);
        }
        let _creating = self.creating.lock().await;
        if let Some(served) = self.lookup(name) {
            return Ok(served);
        }
        if self.members_of(family) >= family.max_members {
            return Err(IdError::TooManyMembers {
                name: name.to_string(),
                family: family.pattern.to_string(),
                limit: family.max_members,
            });
        }
        self.install(name, &family.kind(), false).await
    }

    /// How many members of `family` this node serves (counted when one is about to be
    /// created, under `creating`: rare, and nothing to keep in step).
    pub fn members_of(&self, family: &Family) -> usize {
        let served = self.namespaces.read().unwrap_or_else(|p| p.into_inner());
        served
            .keys()
            .filter(|name| {
                self.config
                    .family_of(name)
                    .is_some_and(|f| f.pattern == family.pattern)
            })
            .count()
    }

    /// How many namespaces were set up by auto-create (at most `max_namespaces`).
    pub fn auto_created_count(&self) -> usize {
        self.auto_created.load(Ordering::Relaxed)
    }

    /// The namespace called `name` for a read (`info`, `decode`): the served one, or else a
    /// read-only view of the authority's stored state. Never creates, installs or reserves
    /// anything, whatever `auto_create` says.
    ///
    /// [`IdError::UnknownNamespace`] when the authority does not know `name` either, or when this
    /// node would not serve it (not loaded, no family's member, and `auto_create` off: its ids
    /// would be refused too).
    pub(crate) async fn read_namespace(&self, name: &str) -> Result<NamespaceView, IdError> {
        let name = NamespaceName::new(name)?;
        if let Some(served) = self.lookup(&name) {
            return Ok(NamespaceView::Served(served.ns));
        }
        if self.config.namespaces.contains_key(&name) {
            return Err(IdError::Unavailable {
                name: name.to_string(),
                reason: "declared but not set up yet: the authority has not answered since the \
                         node started"
                    .to_owned(),
            });
        }
        let cache = match self.config.family_of(&name) {
            Some(family) => family.cache,
            None if self.config.auto_create => self.config.default_sequence.1,
            None => return Err(IdError::UnknownNamespace(name.to_string())),
        };
        match self.authority.state(&name).await {
            Ok(Some(state)) => Ok(NamespaceView::Stored(StoredSequence::new(
                name,
                self.space(state.spec),
                (state.watermark, state.retired),
                crate::config::fit_cache(cache, &state.spec),
            ))),
            Ok(None) => Err(IdError::UnknownNamespace(name.to_string())),
            Err(e) => Err(IdError::Unavailable {
                name: name.to_string(),
                reason: e.to_string(),
            }),
        }
    }

    /// The namespace this node serves under `name`, if it does (declared, or set up by a
    /// request); a read: nothing is created. For embedding and inspection: its
    /// [`Namespace::ids`] bypass the request path (no token, quota or count), which is what
    /// every front-end takes ([`Node::take_ids`]).
    pub fn served_namespace(&self, name: &str) -> Option<Arc<Namespace>> {
        let name = NamespaceName::new(name).ok()?;
        self.lookup(&name).map(|served| served.ns)
    }

    pub(crate) fn lookup(&self, name: &NamespaceName) -> Option<Served> {
        self.namespaces
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    pub(super) async fn install(
        &self,
        name: &NamespaceName,
        kind: &KindConfig,
        auto_created: bool,
    ) -> Result<Served, IdError> {
        let ns = match kind {
            KindConfig::Sequence { spec, cache, order } => {
                let mut seq = self
                    .sequence(name, *spec, *cache)
                    .await?
                    .auto_created(auto_created);
                self.claim_kept(name, *order, &seq).await?;
                if *order == Order::Strict {
                    seq = self.strict_order(name, seq)?;
                }
                return Ok(self.serve_sequence(name, seq, auto_created));
            }
            KindConfig::Snowflake {
                layout,
                shards: Some(shards),
                ..
            } => {
                let Some(peers) = self.peers.clone() else {
                    return Err(IdError::Conflict(format!(
                        "namespace {name:?} has shards = \"owned\", and this node has no [peers] section"
                    )));
                };
                let shards = OwnedShards::new(
                    name.clone(),
                    *layout,
                    *shards,
                    self.authority.clone(),
                    self.config.leases,
                    self.clock.clone(),
                    peers,
                    self.stop.subscribe(),
                    self.config.max_count,
                )?;
                Namespace::Snowflake(SnowflakeNamespace::with_shards(
                    name.clone(),
                    shards,
                    self.metrics.clone(),
                ))
            }
            KindConfig::Snowflake {
                layout,
                worker,
                group,
                shards: None,
            } => {
                let group = group.clone().unwrap_or_else(|| name.clone());
                let worker = self.leased_worker(group, *layout, *worker).await?;
                Namespace::Snowflake(SnowflakeNamespace::new(
                    name.clone(),
                    worker,
                    self.metrics.clone(),
                ))
            }
            KindConfig::Uuid7 => Namespace::Uuid7(
                name.clone(),
                Uuid7Generator::default(),
                self.served_counter(name),
            ),
            KindConfig::Ulid => Namespace::Ulid(
                name.clone(),
                UlidGenerator::default(),
                self.served_counter(name),
            ),
        };
        Ok(self.publish(name, ns, auto_created))
    }

    /// `seq` in strict order: its leadership task started, its answers gated by the term.
    fn strict_order(
        &self,
        name: &NamespaceName,
        seq: SequenceNamespace,
    ) -> Result<SequenceNamespace, IdError> {
        let Some(peers) = self.peers.clone() else {
            return Err(IdError::Conflict(format!(
                "namespace {name:?} is in strict order, and this node has no [peers] section"
            )));
        };
        let strict = Strict::new(
            name.clone(),
            seq.spec().width().bits(),
            seq.supply().clone(),
            self.authority.clone(),
            self.clock.clone(),
            self.config.leases,
            peers,
            self.config.max_count,
        )?;
        let task = tokio::spawn(strict.clone().lead(self.stop.subscribe()));
        self.lock_tasks().push(task);
        Ok(seq.strict(strict))
    }

    /// The worker lease of `group`, taken (and kept renewed by a background task) on first use.
    async fn leased_worker(
        &self,
        group: NamespaceName,
        layout: idmint_core::Layout,
        worker: crate::config::WorkerConfig,
    ) -> Result<Arc<LeasedWorker>, IdError> {
        let existing = self
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&group)
            .cloned();
        if let Some(w) = existing {
            return Ok(w);
        }
        let leased = LeasedWorker::acquire(
            group.clone(),
            layout,
            worker,
            self.authority.clone(),
            self.config.leases,
            self.clock.clone(),
        )
        .await
        .map_err(|e| match e {
            WorkerError::Lease { ref source, .. } if source.is_unavailable() => {
                IdError::Unavailable {
                    name: group.to_string(),
                    reason: e.to_string(),
                }
            }
            other => IdError::Conflict(other.to_string()),
        })?;
        let task = tokio::spawn(leased.clone().keep(self.stop.subscribe()));
        self.lock_tasks().push(task);
        self.workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(group, leased.clone());
        Ok(leased)
    }

    /// The `ids_served` series of `name` (one lookup, then an atomic increment per answer).
    fn served_counter(&self, name: &NamespaceName) -> prometheus_client::metrics::counter::Counter {
        let labels = NamespaceLabels {
            namespace: name.to_string(),
        };
        let counter = self.metrics.ids_served.get_or_create(&labels).clone();
        counter
    }

    async fn sequence(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
        cache: CacheMode,
    ) -> Result<SequenceNamespace, IdError> {
        let state = self
            .authority
            .ensure_namespace(name, spec)
            .await
            .map_err(|e| match e {
                StoreError::SpecConflict { .. } | StoreError::InvalidSetup { .. } => {
                    IdError::Conflict(e.to_string())
                }
                other => authority_error(name.as_str(), other),
            })?;
        let ns = self.sequence_on(name, spec, cache, state.watermark);
        if state.retired {
            ns.supply().note_retired();
        }
        Ok(ns)
    }

    /// A sequence namespace on the authority, known to exist there at `watermark` or above.
    /// The ids of `spec` as this node's authority grants them: its residue classes, each
    /// member's numbered when the authority is a multi one.
    fn space(&self, spec: SequenceSpec) -> IdSpace {
        let residues = self.authority.residues(&spec);
        if self.authority.members().is_some() {
            IdSpace::of_members(spec, residues)
        } else {
            IdSpace::new(spec, residues)
        }
    }

    pub(super) fn sequence_on(
        &self,
        name: &NamespaceName,
        spec: SequenceSpec,
        cache: CacheMode,
        watermark: u64,
    ) -> SequenceNamespace {
        let source: Arc<dyn BlockSource> = Arc::new(self.authority.clone());
        let supply = Supply::new(
            name.clone(),
            SupplyConfig {
                cache,
                refill_wait: self.config.refill_wait,
                watermark,
                space: self.space(spec),
            },
            source,
            self.clock.0.clone(),
            Arc::new(SupplyMetrics::new(&self.metrics, name.as_str())),
        );
        let ns = SequenceNamespace::new(spec, supply);
        // Nothing served yet: the history and the projection start here, not at the first
        // once-a-second sample (which would miss what was served before it).
        ns.sample_served(self.clock.monotonic_nanos());
        ns
    }

    /// The cache of a namespace of `spec` that auto-create would set up now, if it would.
    pub(super) fn auto_create_cache(&self, spec: &SequenceSpec) -> Option<CacheMode> {
        (self.config.auto_create
            && self.auto_created.load(Ordering::Relaxed) < self.config.max_namespaces)
            .then(|| crate::config::fit_cache(self.config.default_sequence.1, spec))
    }

    /// Starts `seq`'s refill task and serves it.
    pub(super) fn serve_sequence(
        &self,
        name: &NamespaceName,
        seq: SequenceNamespace,
        auto_created: bool,
    ) -> Served {
        let task = tokio::spawn(
            seq.supply()
                .clone()
                .refill_loop(self.config.refill_tick, self.stop.subscribe()),
        );
        self.lock_tasks().push(task);
        self.publish(name, Namespace::Sequence(seq), auto_created)
    }

    fn publish(&self, name: &NamespaceName, ns: Namespace, auto_created: bool) -> Served {
        let served = Served {
            ns: Arc::new(ns),
            buckets: Arc::new(Buckets::default()),
        };
        self.namespaces
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone(), served.clone());
        tracing::info!(namespace = %name, kind = served.ns.kind(), auto_created, "serving namespace");
        served
    }
}
