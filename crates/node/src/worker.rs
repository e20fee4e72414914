//! The worker leases a node holds for its snowflake namespaces, and the generator each one
//! drives (docs/design.md invariant 4; docs/uniqueness.md, "Snowflake namespaces").
//!
//! One [`LeasedWorker`] per lease group on this node: the namespaces of a group share its lease
//! and its one generator, so their ids never collide with each other either. It acquires a
//! worker id from the authority ([`idmint_store::WorkerLeases`]), then renews it in the
//! background ([`LeasedWorker::keep`]) and releases it on shutdown.
//!
//! Invariants:
//! - **nothing is issued below a floor**: the generator starts above the floor the lease
//!   carries (every earlier holder of the worker id issued below it). If the clock reads
//!   behind the floor by at most `leases.max_floor_wait_ms` the node waits for it; further
//!   behind, it refuses to start and names both times (a clock stepped back while the node was
//!   down would otherwise repeat timestamps). A fixed worker id last held under this host's
//!   name (this node's previous run) may also wait out the `leases.floor_ahead_ms` that run
//!   recorded ahead, and so may a range of owned shards (passed between nodes);
//! - **nothing is issued above a recorded floor**: the generator's limit
//!   ([`SnowflakeGenerator::set_limit`]) is raised only after a renewal recorded a floor
//!   durably (`now + leases.floor_ahead_ms`), and only to that floor; renewals come at least
//!   every half `floor_ahead`, so a node whose renewals succeed never reaches it;
//! - **nothing is issued after the lease could have expired**: the limit is also at most the
//!   time the last successful renewal was *sent*, plus the TTL, minus `leases.safety_margin_ms`,
//!   on the generator's own clock, which runs at least as fast as monotonic time. A renewal
//!   that keeps failing therefore stops issuing (503, with the reason) before the authority
//!   could give the worker id to anyone else;
//! - **a lost lease is never used again**: a renewal answered `Superseded` sets the limit to 0
//!   for good; the node then acquires a new lease and swaps in a new generator for it;
//! - a clean shutdown stops issuing first, then releases the lease with a floor just above the
//!   last timestamp issued; the authority keeps the higher floor recorded ahead (a floor never
//!   goes down, `idmint_store::lease::kept_floor`), which the next holder waits out;
//! - a generator at its limit while the lease is held (its time jumped past the floor recorded
//!   ahead: a wall clock stepped forward and adopted, or the process paused) asks for a
//!   renewal at once ([`LeasedWorker::not_issuing`]) rather than refusing until the next
//!   period; such early renewals come at most once per retry period (a tenth of the TTL).
//!
//! Every worker id is held as a lease, whatever the configuration names (`"lease"`, a fixed
//! id, the host's ordinal): on `multi` the first member stores them, on `upstream` the tier
//! above. An authority that stores none is refused ([`WorkerError::NoLeases`]).

use crate::config::shards::ShardsConfig;
use crate::config::{LeaseSettings, WorkerConfig};
use crate::error::IdError;
use crate::time::SharedClock;
use arc_swap::ArcSwap;
use idmint_api as api;
use idmint_core::{lease_window, Backoff, Clock, Layout, NamespaceName, SnowflakeGenerator};
use idmint_store::lease::LeaseError;
use idmint_store::{Authority, LeaseRequest, WorkerChoice, WorkerLease};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// The generator type of snowflake namespaces: on the node's clock.
pub type NodeGenerator = SnowflakeGenerator<SharedClock>;

/// Why a worker lease could not be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The authority refused or failed.
    #[error("worker lease for group {group}: {source}")]
    Lease {
        /// The group.
        group: String,
        /// What the authority said.
        source: Box<LeaseError>,
    },
    /// The clock is behind the worker id's floor by more than the configured wait.
    #[error("worker {worker} of group {group} has issued ids up to {floor} (its recorded time floor), but this clock reads {now}, {behind:?} behind; the clock may have been stepped back while the node was down. Not issuing: fix the clock, or raise leases.max_floor_wait_ms to wait for it")]
    ClockBehindFloor {
        /// The group.
        group: String,
        /// The worker id.
        worker: u64,
        /// The floor (RFC 3339).
        floor: String,
        /// The clock (RFC 3339).
        now: String,
        /// By how much.
        behind: Duration,
    },
    /// An authority that stores no leases: no worker id is used without one.
    #[error("group {group}: the {kind} authority stores no worker leases, and a worker id is never used without one (two nodes with one worker id issue the same ids)")]
    NoLeases {
        /// The group.
        group: String,
        /// The authority's kind.
        kind: &'static str,
    },
    /// `worker = "ordinal"` and the host name has no trailing number.
    #[error("worker = \"ordinal\" needs a host name ending in a number (a StatefulSet pod such as web-3); this host is {host:?}")]
    NoOrdinal {
        /// The host name.
        host: String,
    },
    /// The worker id does not fit, or the layout is too late for the clock.
    #[error("group {group}: {message}")]
    Generator {
        /// The group.
        group: String,
        /// What the generator said.
        message: String,
    },
}

/// Which values of the layout's node field a lease issues under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeSpan {
    /// The leased worker id itself (a snowflake namespace's worker).
    Worker,
    /// Lease `r` holds the shards of range `r` ([`ShardsConfig::shards_of`]), one generator
    /// each ([`crate::shards`]).
    Shards(ShardsConfig),
}

impl NodeSpan {
    /// The node-field values lease `worker` issues under.
    pub fn nodes_of(&self, worker: u64) -> std::ops::Range<u64> {
        match *self {
            NodeSpan::Worker => worker..worker.saturating_add(1),
            NodeSpan::Shards(config) => config.shards_of(worker),
        }
    }

    /// How many leases the group has, under `layout`.
    fn leases(&self, layout: &Layout) -> u64 {
        match *self {
            NodeSpan::Worker => layout.max_node().saturating_add(1),
            NodeSpan::Shards(config) => config.ranges(),
        }
    }
}

/// The generators of the current lease (one per node-field value it holds), and the lease.
/// Every generator shares the lease's limit: they are renewed, stopped and released together.
#[derive(Debug)]
pub struct Generation {
    /// The node-field value of `generators[0]`.
    first: u64,
    generators: Vec<NodeGenerator>,
    lease: Option<WorkerLease>,
}

impl Generation {
    /// The generator (of the first node-field value the lease holds).
    pub fn generator(&self) -> &NodeGenerator {
        // Never empty: a generation is made with at least one generator.
        &self.generators[0]
    }

    /// The generator of node-field value `node`, if the lease holds it.
    pub fn generator_for(&self, node: u64) -> Option<&NodeGenerator> {
        let i = usize::try_from(node.checked_sub(self.first)?).ok()?;
        self.generators.get(i)
    }

    /// The lease's fencing token (0 without a lease).
    pub fn token(&self) -> u64 {
        self.lease.as_ref().map_or(0, |l| l.token)
    }

    fn set_limit(&self, limit: u64) {
        for g in &self.generators {
            g.set_limit(limit);
        }
    }
}

#[derive(Debug, Clone)]
struct Status {
    status: api::LeaseStatus,
    last_error: Option<String>,
    floor_unix_ms: u64,
}

/// A worker id held by this node for one lease group. See the module docs.
#[derive(Debug)]
pub struct LeasedWorker {
    group: NamespaceName,
    layout: Layout,
    choice: WorkerChoice,
    span: NodeSpan,
    holder: String,
    authority: Arc<dyn Authority>,
    settings: LeaseSettings,
    clock: SharedClock,
    current: ArcSwap<Generation>,
    status: Mutex<Status>,
    /// Notified when a request found the generator at its limit while the lease is held.
    renew_soon: tokio::sync::Notify,
}

/// `host pid N`: who holds a lease, for messages and listings; the same name the audit ledger
/// records as the holder of this process's grants ([`idmint_store::audit::holder`]).
pub fn holder_name() -> String {
    idmint_store::audit::holder().to_string()
}

/// This machine's host name ([`idmint_store::audit::host_name`]).
pub fn host_name() -> String {
    idmint_store::audit::host_name()
}

/// The trailing number of a host name (`web-3` → 3), as a StatefulSet names its pods.
pub fn ordinal_of(host: &str) -> Option<u64> {
    let digits = host.len() - host.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    host[host.len() - digits..].parse().ok()
}

/// The layout as the authority records it (the layout lock): every field that changes which
/// id a time, node and sequence make ([`idmint_core::lease_window::lock_text`]).
pub fn layout_text(layout: &Layout) -> String {
    lease_window::lock_text(layout)
}

fn rfc3339_ms(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl LeasedWorker {
    /// Takes a worker id for `group` as `worker` says, waits for its floor if needed, records a
    /// floor ahead, and returns the worker ready to issue. Run [`LeasedWorker::keep`] next.
    pub async fn acquire(
        group: NamespaceName,
        layout: Layout,
        worker: WorkerConfig,
        authority: Arc<dyn Authority>,
        settings: LeaseSettings,
        clock: SharedClock,
    ) -> Result<Arc<LeasedWorker>, WorkerError> {
        let choice = match worker {
            WorkerConfig::Lease => WorkerChoice::LowestFree,
            WorkerConfig::Fixed(n) => WorkerChoice::Exactly(n),
            WorkerConfig::Ordinal => {
                let host = host_name();
                WorkerChoice::Exactly(ordinal_of(&host).ok_or(WorkerError::NoOrdinal { host })?)
            }
        };
        Self::acquire_span(
            group,
            layout,
            choice,
            NodeSpan::Worker,
            holder_name(),
            authority,
            settings,
            clock,
        )
        .await
    }

    /// Takes lease `choice` of `group`, whose leases each hold the node-field values `span`
    /// says, under `holder` (`host pid N`, or `host pid N at URL` for a lease other nodes
    /// forward to). Otherwise as [`LeasedWorker::acquire`]; a lease held by another process is
    /// refused ([`LeaseError::Held`]) at once unless it is a worker id of this host's.
    #[allow(clippy::too_many_arguments)]
    pub async fn acquire_span(
        group: NamespaceName,
        layout: Layout,
        choice: WorkerChoice,
        span: NodeSpan,
        holder: String,
        authority: Arc<dyn Authority>,
        settings: LeaseSettings,
        clock: SharedClock,
    ) -> Result<Arc<LeasedWorker>, WorkerError> {
        if authority.worker_leases().is_none() {
            return Err(WorkerError::NoLeases {
                group: group.to_string(),
                kind: authority.kind(),
            });
        }
        let worker = LeasedWorker {
            group,
            layout,
            choice,
            span,
            holder,
            authority,
            settings,
            clock,
            // Replaced below before anything is issued; limit 0 meanwhile.
            current: ArcSwap::from_pointee(Generation {
                first: 0,
                generators: vec![Self::stopped_generator(layout)?],
                lease: None,
            }),
            status: Mutex::new(Status {
                status: api::LeaseStatus::Held,
                last_error: None,
                floor_unix_ms: 0,
            }),
            renew_soon: tokio::sync::Notify::new(),
        };
        let generation = worker.take_lease(None).await?;
        worker.current.store(Arc::new(generation));
        Ok(Arc::new(worker))
    }

    /// A generator that issues nothing, standing in until the first lease is taken.
    fn stopped_generator(layout: Layout) -> Result<NodeGenerator, WorkerError> {
        let clock = SharedClock(Arc::new(idmint_core::SystemClock::new()));
        let g = SnowflakeGenerator::new(layout, 0, clock, Some(0)).map_err(|e| {
            WorkerError::Generator {
                group: String::new(),
                message: e.to_string(),
            }
        })?;
        g.set_limit(0);
        Ok(g)
    }

    /// A generator for worker `n` issuing only timestamps whose unit starts at or after
    /// `floor_unix_ms`.
    fn generator(
        group: &NamespaceName,
        layout: Layout,
        n: u64,
        clock: &SharedClock,
        floor_unix_ms: u64,
    ) -> Result<NodeGenerator, WorkerError> {
        let resume_after = lease_window::resume_after(&layout, floor_unix_ms);
        SnowflakeGenerator::new(layout, n, clock.clone(), resume_after).map_err(|e| {
            WorkerError::Generator {
                group: group.to_string(),
                message: e.to_string(),
            }
        })
    }

    fn lease_error(&self, source: LeaseError) -> WorkerError {
        WorkerError::Lease {
            group: self.group.to_string(),
            source: Box::new(source),
        }
    }

    fn now_ms(&self) -> u64 {
        self.clock.wall_nanos() / 1_000_000
    }

    /// Acquires a lease, waits for its floor, records a floor ahead, and returns the
    /// generation to issue with. After `previous` (a lease this node lost), the new generator
    /// starts above every timestamp the previous one issued, whatever the clock reads now:
    /// ids of this node never go back, even with another worker id.
    async fn take_lease(&self, previous: Option<&Generation>) -> Result<Generation, WorkerError> {
        let leases = self
            .authority
            .worker_leases()
            .ok_or(WorkerError::NoLeases {
                group: self.group.to_string(),
                kind: self.authority.kind(),
            })?;
        let max_wait_ms = u64::try_from(self.settings.max_floor_wait.as_millis()).unwrap_or(0);
        // Every timestamp the previous generation issued lies below this.
        let own_floor = previous.map_or(0, |g| self.issued_below_ms(g));
        let request = LeaseRequest {
            group: self.group.clone(),
            workers: self.span.leases(&self.layout),
            choice: self.choice,
            prefer_floor_at_most: Some(self.now_ms().saturating_add(max_wait_ms)),
            // Unique to this acquisition: renewals are matched on it with the token.
            holder: idmint_store::lease::unique_holder(&self.holder),
            layout: self.group_layout(),
            ttl: self.settings.ttl,
        };
        // Shard ranges are taken on demand and held by whichever node asked first: one held
        // elsewhere is forwarded to, never waited for.
        let own_host_waits = self.span == NodeSpan::Worker;
        // A fixed worker id last held under this host's name was most likely held by this
        // node's previous run: after a kill -9 its floor is up to `floor_ahead` ahead (recorded
        // before issuing), which is worth waiting for rather than refusing to start.
        let mut allowed_wait = self.settings.max_floor_wait;
        // A range of shards passes between nodes on every clean stop, and a release never
        // lowers the floor its holder recorded up to `floor_ahead` ahead
        // (`idmint_store::lease::kept_floor`): the next holder waits that out.
        if !own_host_waits {
            allowed_wait += self.settings.floor_ahead;
        }
        if let (WorkerChoice::Exactly(w), true) = (self.choice, own_host_waits) {
            if let Ok(Some((_, slots))) = leases.group(&self.group).await {
                let ours = slots.iter().any(|s| {
                    s.worker == w && s.holder.split(" pid ").next() == Some(host_name().as_str())
                });
                if ours {
                    allowed_wait += self.settings.floor_ahead;
                }
            }
        }
        let lease = match leases.acquire(&request).await {
            // A fixed worker id held under this host's name: most likely this node's previous
            // run, killed before it released. Wait once for that lease to expire.
            Err(LeaseError::Held {
                holder, expires_in, ..
            }) if own_host_waits
                && holder.split(" pid ").next() == Some(host_name().as_str())
                && expires_in <= self.settings.ttl =>
            {
                tracing::info!(group = %self.group, %holder, ?expires_in,
                    "the worker id is leased under this host's name (a previous run?); waiting for that lease to expire");
                tokio::time::sleep(expires_in + Duration::from_millis(100)).await;
                leases.acquire(&request).await
            }
            other => other,
        }
        .map_err(|e| self.lease_error(e))?;
        let floor = lease.floor_unix_ms;
        // Wait for the floor if it is near; refuse if it is far. This node's own earlier
        // timestamps count as reached: the new generator continues above them.
        let deadline = self.clock.monotonic_nanos() + nanos(allowed_wait);
        loop {
            let now = self.now_ms().max(own_floor);
            if now >= floor {
                break;
            }
            let behind = Duration::from_millis(floor - now);
            if behind > allowed_wait || self.clock.monotonic_nanos() > deadline {
                // Keep the floor; free the worker id.
                if let Err(e) = leases.release(&lease, floor).await {
                    tracing::warn!(group = %self.group, error = %e, "could not release the worker lease");
                }
                return Err(WorkerError::ClockBehindFloor {
                    group: self.group.to_string(),
                    worker: lease.worker,
                    floor: rfc3339_ms(floor),
                    now: rfc3339_ms(now),
                    behind,
                });
            }
            tracing::info!(group = %self.group, worker = lease.worker, ?behind, "waiting for the worker id's time floor");
            tokio::time::sleep(behind.min(Duration::from_millis(100))).await;
        }
        let nodes = self.span.nodes_of(lease.worker);
        let generators = nodes
            .clone()
            .map(|n| {
                Self::generator(
                    &self.group,
                    self.layout,
                    n,
                    &self.clock,
                    floor.max(own_floor),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        if generators.is_empty() {
            return Err(WorkerError::Generator {
                group: self.group.to_string(),
                message: format!("lease {} holds no node-field value", lease.worker),
            });
        }
        let generation = Generation {
            first: nodes.start,
            generators,
            lease: Some(lease),
        };
        generation.set_limit(0);
        self.renew(&generation)
            .await
            .map_err(|e| self.lease_error(e))?;
        tracing::info!(group = %self.group, worker = generation.lease.as_ref().map_or(0, |l| l.worker),
            token = generation.lease.as_ref().map_or(0, |l| l.token), floor = %rfc3339_ms(floor),
            "worker lease acquired");
        Ok(generation)
    }

    /// Renews the lease of `generation`, recording a floor ahead, then raises its generator's
    /// limit to what the renewal covers.
    async fn renew(&self, generation: &Generation) -> Result<(), LeaseError> {
        let Some(lease) = &generation.lease else {
            return Ok(());
        };
        let Some(leases) = self.authority.worker_leases() else {
            return Ok(());
        };
        let g = generation.generator();
        let sent_at = g.now_unix_nanos();
        let floor_ms = (sent_at / 1_000_000).saturating_add(
            u64::try_from(self.settings.floor_ahead.as_millis()).unwrap_or(u64::MAX),
        );
        let renewed = leases.renew(lease, floor_ms).await?;
        // The authority's TTL counts from when it received the renewal, after `sent_at`.
        let limit = lease_window::limit_after_renewal(
            &self.layout,
            sent_at,
            renewed.floor_unix_ms,
            renewed.ttl,
            self.settings.safety_margin,
        );
        // Only the current, unfenced generation is ever renewed (`keep` is the one caller
        // besides `take_lease`, which renews the generation it just made).
        generation.set_limit(limit);
        let mut status = self.lock_status();
        status.status = api::LeaseStatus::Held;
        status.last_error = None;
        status.floor_unix_ms = renewed.floor_unix_ms;
        Ok(())
    }

    /// A time (ms since the Unix epoch) above every timestamp the generators of `generation`
    /// issued (or were started above): every issued unit starts before the start of the unit
    /// after the last one.
    fn issued_below_ms(&self, generation: &Generation) -> u64 {
        generation
            .generators
            .iter()
            .filter_map(|g| g.last_timestamp())
            .max()
            .map_or(0, |ts| lease_window::issued_below_ms(&self.layout, ts))
    }

    /// The layout text the group records: the layout, and for shard ranges how the shards are
    /// split (two namespaces that split them differently never share a group).
    fn group_layout(&self) -> String {
        match self.span {
            NodeSpan::Worker => layout_text(&self.layout),
            NodeSpan::Shards(config) => crate::shards::range_layout_text(&self.layout, &config),
        }
    }

    fn lock_status(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn status(&self) -> Status {
        self.lock_status().clone()
    }

    /// Whether the lease was lost (superseded): nothing is issued under it again.
    pub fn is_lost(&self) -> bool {
        self.status().status == api::LeaseStatus::Lost
    }

    /// The current generation (lock-free).
    pub fn current(&self) -> arc_swap::Guard<Arc<Generation>> {
        self.current.load()
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The group.
    pub fn group(&self) -> &NamespaceName {
        &self.group
    }

    /// Why the generator is not issuing, for a 503's message. With the lease held and renewed,
    /// the generator's time outran the floor recorded ahead (a clock stepped forward and
    /// adopted, a pause): this also asks [`LeasedWorker::keep`] to renew now.
    pub fn not_issuing(&self, namespace: &NamespaceName) -> IdError {
        let status = self.status();
        if status.status == api::LeaseStatus::Held {
            self.renew_soon.notify_one();
        }
        let reason = match status.status {
            api::LeaseStatus::Lost => format!(
                "the worker lease of group {} was lost; not issuing until a new one is acquired",
                self.group
            ),
            _ => format!(
                "the worker lease of group {} is not renewed up to now (floor {}){}; not issuing until it is",
                self.group,
                rfc3339_ms(status.floor_unix_ms),
                status
                    .last_error
                    .map(|e| format!(", last renewal: {e}"))
                    .unwrap_or_default()
            ),
        };
        IdError::Unavailable {
            name: namespace.to_string(),
            reason,
        }
    }

    /// One precise reading of the clock, which refreshes the coarse readings the generator
    /// issues with: after the process was paused (SIGSTOP, a frozen VM) they are stale until
    /// the ticker thread runs again, and a request must see the time that passed, or it would
    /// judge the lease's deadline on a time from before the pause. Once per request.
    pub fn refresh_clock(&self) {
        let _ = self.clock.monotonic_nanos();
    }

    /// The lease as the API shows it (`None` without a lease).
    pub fn lease_state(&self) -> Option<api::WorkerLeaseState> {
        let generation = self.current();
        let lease = generation.lease.as_ref()?;
        let status = self.status();
        Some(api::WorkerLeaseState {
            group: self.group.to_string(),
            status: status.status,
            token: lease.token,
            floor: rfc3339_ms(status.floor_unix_ms.max(lease.floor_unix_ms)),
            holder: idmint_store::lease::public_holder(&lease.holder).to_owned(),
            last_error: status.last_error,
        })
    }

    /// Renews until `stop`, re-acquiring a lease that was lost. The renewal period is a third of
    /// the TTL, or half of `floor_ahead` if that is shorter (each renewal records the floor
    /// `floor_ahead` ahead, and the generator stops there: renewing less often would stop it
    /// until the next renewal); a failed renewal is retried with a backoff of at most a tenth
    /// of the TTL.
    pub async fn keep(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        // A backend may grant less than asked (ZooKeeper clamps to its session timeouts).
        let ttl = || {
            self.current()
                .lease
                .as_ref()
                .map_or(self.settings.ttl, |l| l.ttl.min(self.settings.ttl))
        };
        let period = || (ttl() / 3).min(self.settings.floor_ahead / 2);
        let retry = || (ttl() / 10).max(Duration::from_millis(10));
        // After a failure: sooner at first, never more than a retry period apart.
        let backoff = || Backoff::new(retry() / 8, retry());
        let mut failures = backoff();
        let mut wait = period();
        let mut last_attempt = tokio::time::Instant::now();
        loop {
            let asked = tokio::select! {
                _ = tokio::time::sleep(wait) => false,
                _ = self.renew_soon.notified() => true,
                _ = stop.changed() => return,
            };
            if asked {
                // At most one early renewal per retry period.
                tokio::select! {
                    _ = tokio::time::sleep_until(last_attempt + retry()) => {}
                    _ = stop.changed() => return,
                }
            }
            if *stop.borrow() {
                return;
            }
            last_attempt = tokio::time::Instant::now();
            let generation = self.current.load_full();
            if self.status().status == api::LeaseStatus::Lost {
                if self.span != NodeSpan::Worker {
                    // A shard range lost is dropped; its owner takes the range afresh
                    // (`crate::shards`).
                    return;
                }
                match self.take_lease(Some(&generation)).await {
                    Ok(g) => {
                        self.current.store(Arc::new(g));
                        failures = backoff();
                        wait = period();
                    }
                    Err(e) => {
                        tracing::warn!(group = %self.group, error = %e, "could not acquire a new worker lease");
                        self.lock_status().last_error = Some(e.to_string());
                        wait = failures.delay();
                    }
                }
                continue;
            }
            match self.renew(&generation).await {
                Ok(()) => {
                    failures = backoff();
                    wait = period();
                }
                Err(e @ LeaseError::Superseded { .. }) => {
                    generation.set_limit(0);
                    tracing::error!(group = %self.group, error = %e, "worker lease lost; not issuing under it again");
                    let mut status = self.lock_status();
                    status.status = api::LeaseStatus::Lost;
                    status.last_error = Some(e.to_string());
                    wait = failures.delay();
                }
                Err(e) => {
                    tracing::warn!(group = %self.group, error = %e, "worker lease renewal failed; retrying");
                    let mut status = self.lock_status();
                    status.status = api::LeaseStatus::Renewing;
                    status.last_error = Some(e.to_string());
                    wait = failures.delay();
                }
            }
        }
    }

    /// Stops issuing and releases the lease with a floor just above the last timestamp issued.
    /// Call after the front-ends drained and [`LeasedWorker::keep`] returned.
    pub async fn release(&self) {
        let generation = self.current.load_full();
        generation.set_limit(0);
        let (Some(lease), Some(leases)) = (&generation.lease, self.authority.worker_leases())
        else {
            return;
        };
        if self.status().status == api::LeaseStatus::Lost {
            return;
        }
        let floor = self.issued_below_ms(&generation).max(lease.floor_unix_ms);
        match leases.release(lease, floor).await {
            Ok(()) => {
                tracing::info!(group = %self.group, worker = lease.worker, floor = %rfc3339_ms(floor), "worker lease released")
            }
            Err(e) => {
                tracing::warn!(group = %self.group, error = %e, "could not release the worker lease; it expires by itself")
            }
        }
    }
}

#[cfg(test)]
mod tests;
