//! [`LocalSnowflake`]: snowflake ids made in the application, under a worker id leased from
//! the nodes ([`crate::Client::local_snowflake`], docs/clients.md "Local snowflake ids").
//!
//! The handle leases a worker id of the namespace's lease group (the pool the nodes' own
//! workers lease from, so nodes and handles never share one) with the namespace's layout,
//! renews it in the background, and issues ids with [`idmint_core::SnowflakeGenerator`] under
//! the same rules as a node's worker (docs/design.md invariant 4):
//! - **nothing below a floor**: the generator starts above the lease's floor (every earlier
//!   holder issued below it); a floor more than [`LocalSnowflakeConfig::max_floor_wait`] ahead
//!   of the clock is refused, a nearer one waited for;
//! - **nothing above a recorded floor, nothing after the lease could expire**: each renewal
//!   records a floor [`LocalSnowflakeConfig::floor_ahead`] ahead, and the generator's limit is
//!   that floor and the renewal's send time + TTL − [`LocalSnowflakeConfig::safety_margin`]
//!   ([`generation`]); a process paused or cut off past that stops issuing, with an error
//!   naming the last renewal's failure, before the nodes may lease the worker id again;
//! - **a lost lease is never used again**: a renewal answered `superseded` stops its
//!   generator for good; the renewal task then leases anew, with a generator above every id
//!   the handle issued;
//! - **layout lock**: the acquisition names the layout's text; a group recording another is
//!   refused (`layout_conflict`) before any id is made;
//! - [`LocalSnowflake::close`] stops issuing, stops the renewals, and releases the lease with
//!   a floor above the last id; a handle dropped without it stops renewing and lets the lease
//!   expire (its floor recorded ahead keeps the next holder above its ids).
//!
//! No lock is held across `.await`; the hot path ([`LocalSnowflake::next`]) is one lock-free
//! load of the current generation and the generator's compare-and-swap.

mod calls;
pub(crate) mod generation;

use crate::error::ClientError;
use crate::nodes::Nodes;
use arc_swap::ArcSwap;
use generation::{Generation, Lease, LocalClock};
use idmint_core::{Backoff, Clock, FieldOrder, Layout, LayoutSpec, NextIdError};
use idmint_proto::v1 as proto;
use proto::namespace_info::Kind as InfoKind;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// Settings of a [`LocalSnowflake`]. The defaults are the nodes' `[leases]` defaults.
#[derive(Clone)]
#[non_exhaustive]
pub struct LocalSnowflakeConfig {
    /// How long the lease lives without a renewal, by the nodes' store's clock (10 s).
    /// Renewals come every third of it; an outage of the nodes shorter than
    /// `ttl − safety_margin` does not stop issuing.
    pub ttl: Duration,
    /// How far ahead of the clock each renewal records the worker's floor (5 s); renewals come
    /// at least every half of it.
    pub floor_ahead: Duration,
    /// Issuing stops this long before the lease could expire (2 s).
    pub safety_margin: Duration,
    /// A worker id whose floor is ahead of the clock by at most this is waited for; further
    /// ahead, the lease is released and refused (2 s).
    pub max_floor_wait: Duration,
    /// The layout ids are made with; `None`: the namespace's, as the nodes describe it. A
    /// layout other than the one the lease group records is refused (`layout_conflict`).
    pub layout: Option<Layout>,
    /// The clock ids are stamped with; `None`: the process-wide coarse clock (one atomic load a
    /// reading, refreshed every millisecond).
    pub clock: Option<Arc<dyn Clock>>,
}

impl Default for LocalSnowflakeConfig {
    fn default() -> Self {
        LocalSnowflakeConfig {
            ttl: Duration::from_secs(10),
            floor_ahead: Duration::from_secs(5),
            safety_margin: Duration::from_secs(2),
            max_floor_wait: Duration::from_secs(2),
            layout: None,
            clock: None,
        }
    }
}

impl std::fmt::Debug for LocalSnowflakeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSnowflakeConfig")
            .field("ttl", &self.ttl)
            .field("floor_ahead", &self.floor_ahead)
            .field("safety_margin", &self.safety_margin)
            .field("max_floor_wait", &self.max_floor_wait)
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}

impl LocalSnowflakeConfig {
    fn check(&self) -> Result<(), ClientError> {
        let ok = self.safety_margin < self.ttl / 2
            && self.floor_ahead < self.ttl
            && !self.floor_ahead.is_zero()
            && self.ttl >= Duration::from_millis(10);
        if ok {
            Ok(())
        } else {
            Err(ClientError::InvalidConfig {
                message: format!(
                    "local snowflake: need ttl >= 10 ms, 0 < floor_ahead < ttl and \
                     safety_margin < ttl / 2 (ttl {:?}, floor_ahead {:?}, safety_margin {:?})",
                    self.ttl, self.floor_ahead, self.safety_margin
                ),
            })
        }
    }
}

/// Why the handle is not issuing, for [`LocalSnowflake::next`]'s error.
#[derive(Debug, Clone, Default)]
struct Status {
    closed: bool,
    lost: bool,
    last_error: Option<String>,
}

#[derive(Debug)]
struct Shared {
    namespace: String,
    layout: Layout,
    nodes: Arc<Nodes>,
    clock: LocalClock,
    config: LocalSnowflakeConfig,
    acquire: calls::Acquire,
    current: ArcSwap<Generation>,
    /// A std lock: held for a read or a write, never across `.await`.
    status: Mutex<Status>,
    /// Notified when `next` found the generator at its limit while the lease is held.
    renew_soon: Notify,
}

/// Snowflake ids made in this process under a leased worker id. See the module docs.
#[derive(Debug)]
pub struct LocalSnowflake {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for LocalSnowflake {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self
            .task
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }
}

/// What [`LocalSnowflake::open`] needs to know of the namespace.
pub(crate) struct Target {
    pub(crate) namespace: String,
    pub(crate) group: String,
    pub(crate) layout: Layout,
}

/// The namespace `info` describes as a target for a local generator: a snowflake namespace
/// whose worker ids are leased (a pool), not shard-owned, described by a node that names its
/// layout whole.
pub(crate) fn target_of(ns: &str, info: proto::NamespaceInfo) -> Result<Target, ClientError> {
    let rejected = |message: String| ClientError::Rejected {
        code: Some("wrong_kind".into()),
        message,
    };
    let Some(InfoKind::Snowflake(info)) = info.kind else {
        return Err(rejected(format!(
            "namespace {ns} is not a snowflake namespace: local ids are snowflake ids"
        )));
    };
    if info.shards.is_some() {
        return Err(rejected(format!(
            "namespace {ns} has shards = \"owned\": its node field is the data's shard, served \
             by the node holding it, never leased to a client"
        )));
    }
    let group = info.worker_pool.map(|p| p.group).ok_or_else(|| {
        rejected(format!(
            "namespace {ns} has a fixed worker id on an authority that stores no leases: \
             there is no pool to lease a worker id from"
        ))
    })?;
    let l = info
        .layout
        .ok_or_else(|| ClientError::node("the node described no layout"))?;
    if l.time_unit_ns == 0 || l.max_bits == 0 {
        return Err(ClientError::node(
            "the node does not describe the layout's time unit and bit limit (an older node): \
             pass LocalSnowflakeConfig::layout",
        ));
    }
    let narrow =
        |v: u32| u8::try_from(v).map_err(|_| ClientError::node("a layout field above 255"));
    let spec = LayoutSpec {
        timestamp_bits: narrow(l.timestamp_bits)?,
        node_bits: narrow(l.node_bits)?,
        sequence_bits: narrow(l.sequence_bits)?,
        time_unit: Duration::from_nanos(l.time_unit_ns),
        epoch_unix_ms: l.epoch_unix_ms,
        order: match l.order() {
            proto::FieldOrder::SequenceThenNode => FieldOrder::SequenceThenNode,
            _ => FieldOrder::NodeThenSequence,
        },
        max_bits: narrow(l.max_bits)?,
    };
    let layout = Layout::new(spec)
        .map_err(|e| ClientError::node(format!("the node described an invalid layout: {e}")))?;
    Ok(Target {
        namespace: ns.to_owned(),
        group,
        layout,
    })
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl LocalSnowflake {
    /// Leases a worker id of `target`'s group and starts renewing it.
    pub(crate) async fn open(
        nodes: Arc<Nodes>,
        target: Target,
        config: LocalSnowflakeConfig,
    ) -> Result<LocalSnowflake, ClientError> {
        config.check()?;
        let layout = config.layout.unwrap_or(target.layout);
        let clock = LocalClock(
            config
                .clock
                .clone()
                .unwrap_or_else(|| Arc::new(idmint_core::CoarseClock::new())),
        );
        let acquire = calls::Acquire {
            group: target.group,
            workers: layout.max_node().saturating_add(1),
            prefer_floor_at_most: 0,
            holder: format!(
                "client pid {} local {}",
                std::process::id(),
                target.namespace
            ),
            layout: idmint_core::lease_window::lock_text(&layout),
            ttl: config.ttl,
        };
        let mut shared = Shared {
            namespace: target.namespace,
            layout,
            nodes,
            clock,
            config,
            acquire,
            // Replaced below before anything is issued.
            current: ArcSwap::from_pointee(stopped(layout)?),
            status: Mutex::new(Status::default()),
            renew_soon: Notify::new(),
        };
        let first = shared.take_lease(0).await?;
        shared.current = ArcSwap::from_pointee(first);
        let shared = Arc::new(shared);
        let (stop, stopped_rx) = watch::channel(false);
        let task = tokio::spawn(keep(shared.clone(), stopped_rx));
        Ok(LocalSnowflake {
            shared,
            stop,
            task: Mutex::new(Some(task)),
        })
    }

    /// The next id: strictly greater than every id this handle made before, made in this
    /// process (no network). Fails when the lease is not renewed up to now (`lease_expired`,
    /// retryable: the renewals go on), was lost and not yet replaced (`lease_lost`), after
    /// [`LocalSnowflake::close`] ([`ClientError::Closed`]), or when the layout's time ran out.
    #[inline]
    pub fn next(&self) -> Result<u64, ClientError> {
        match self.shared.current.load().next_id() {
            Ok(id) => Ok(id),
            Err(e) => Err(self.shared.not_issuing(e)),
        }
    }

    /// The layout ids are made with.
    pub fn layout(&self) -> &Layout {
        &self.shared.layout
    }

    /// The worker id currently leased.
    pub fn worker(&self) -> u64 {
        self.shared.current.load().lease.worker
    }

    /// Stops issuing, stops the renewals and releases the lease with a floor above the last
    /// id, so the next holder of the worker id starts above it. A second call does nothing.
    pub async fn close(&self) {
        {
            let mut status = self.shared.lock_status();
            if status.closed {
                return;
            }
            status.closed = true;
        }
        let _ = self.stop.send(true);
        let task = self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            // A task that panicked has nothing in flight any more.
            let _ = task.await;
        }
        let generation = self.shared.current.load_full();
        generation.stop();
        if self.shared.lock_status().lost {
            return;
        }
        let floor = generation
            .issued_below_ms()
            .max(generation.lease.floor_unix_ms);
        // A release that fails leaves the lease to expire; its floor recorded ahead stays.
        let _ = calls::release(
            &self.shared.nodes,
            &self.shared.namespace,
            &generation.lease,
            floor,
        )
        .await;
    }
}

/// A generation that issues nothing, standing in until the first lease is taken.
fn stopped(layout: Layout) -> Result<Generation, ClientError> {
    let lease = Lease {
        group: String::new(),
        worker: 0,
        token: 0,
        floor_unix_ms: 0,
        ttl: Duration::ZERO,
        holder: String::new(),
    };
    let clock = LocalClock(Arc::new(idmint_core::SystemClock::new()));
    Generation::new(layout, lease, clock, 0).map_err(|m| ClientError::InvalidConfig { message: m })
}

impl Shared {
    fn lock_status(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now_ms(&self) -> u64 {
        self.clock.wall_nanos() / 1_000_000
    }

    /// The error of a generator that would not issue.
    #[cold]
    fn not_issuing(&self, e: NextIdError) -> ClientError {
        let ns = &self.namespace;
        if let NextIdError::TimeExhausted = e {
            return ClientError::Exhausted {
                code: Some("time_exhausted".into()),
                message: format!("namespace {ns}: the layout's timestamp field ran out"),
            };
        }
        let status = self.lock_status().clone();
        if status.closed {
            return ClientError::Closed;
        }
        let last = status
            .last_error
            .map(|e| format!("; last renewal: {e}"))
            .unwrap_or_default();
        if status.lost {
            return ClientError::Unavailable {
                code: Some("lease_lost".into()),
                message: format!(
                    "the worker lease of namespace {ns} was lost (taken over); not issuing \
                     until a new one is leased{last}"
                ),
            };
        }
        self.renew_soon.notify_one();
        ClientError::Unavailable {
            code: Some("lease_expired".into()),
            message: format!(
                "the worker lease of namespace {ns} is not renewed up to now (the nodes did not \
                 answer for longer than the lease's TTL less its safety margin); not issuing \
                 until it is, as another process may lease the worker id{last}"
            ),
        }
    }

    /// Acquires a lease, waits for a near floor or refuses a far one, renews it once, and
    /// returns the generation to issue with, above `own_floor_ms`.
    async fn take_lease(&self, own_floor_ms: u64) -> Result<Generation, ClientError> {
        let wait = self.config.max_floor_wait;
        let mut request = self.acquire.clone();
        request.prefer_floor_at_most = self.now_ms().saturating_add(millis(wait));
        let lease = calls::acquire(&self.nodes, &self.namespace, &request).await?;
        let floor = lease.floor_unix_ms;
        let deadline = self.clock.monotonic_nanos().saturating_add(nanos(wait));
        loop {
            let now = self.now_ms().max(own_floor_ms);
            if now >= floor {
                break;
            }
            let behind = Duration::from_millis(floor - now);
            if behind > wait || self.clock.monotonic_nanos() > deadline {
                let _ = calls::release(&self.nodes, &self.namespace, &lease, floor).await;
                return Err(ClientError::Rejected {
                    code: Some("clock_behind_floor".into()),
                    message: format!(
                        "worker {} of group {} has issued ids up to {floor} ms since the Unix \
                         epoch (its floor), but this clock reads {now}, {behind:?} behind: the \
                         clock may have been stepped back. Not issuing",
                        lease.worker, lease.group
                    ),
                });
            }
            tokio::time::sleep(behind.min(Duration::from_millis(100))).await;
        }
        let generation = Generation::new(self.layout, lease, self.clock.clone(), own_floor_ms)
            .map_err(|message| ClientError::Rejected {
                code: Some("lease_refused".into()),
                message,
            })?;
        if let Err(e) = self.renew(&generation).await {
            let _ = calls::release(&self.nodes, &self.namespace, &generation.lease, floor).await;
            return Err(e);
        }
        Ok(generation)
    }

    /// Renews `generation`'s lease with a floor ahead, then lets it issue up to what the
    /// renewal covers.
    async fn renew(&self, generation: &Generation) -> Result<(), ClientError> {
        let sent_at = generation.now_unix_nanos();
        let floor = (sent_at / 1_000_000).saturating_add(millis(self.config.floor_ahead));
        let renewed = calls::renew(&self.nodes, &self.namespace, &generation.lease, floor).await?;
        generation.renewed(
            sent_at,
            renewed.floor_unix_ms,
            renewed.ttl,
            self.config.safety_margin,
        );
        self.lock_status().last_error = None;
        Ok(())
    }
}

/// Renews until `stop`, leasing anew after a lease was lost. Every third of the TTL (at least
/// every half `floor_ahead`); a failed renewal is retried with a backoff of at most a tenth of
/// the TTL; `next` at its limit asks for one at once (at most once per retry period).
async fn keep(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let ttl = shared.config.ttl;
    let period = (ttl / 3).min(shared.config.floor_ahead / 2);
    let retry = (ttl / 10).max(Duration::from_millis(10));
    let backoff = || Backoff::new(retry / 8, retry);
    let mut failures = backoff();
    let mut wait = period;
    let mut last_attempt = tokio::time::Instant::now();
    loop {
        let asked = tokio::select! {
            _ = tokio::time::sleep(wait) => false,
            _ = shared.renew_soon.notified() => true,
            _ = stop.changed() => return,
        };
        if asked {
            tokio::select! {
                _ = tokio::time::sleep_until(last_attempt + retry) => {}
                _ = stop.changed() => return,
            }
        }
        if *stop.borrow() {
            return;
        }
        last_attempt = tokio::time::Instant::now();
        let generation = shared.current.load_full();
        let lost = shared.lock_status().lost;
        let outcome = if lost {
            match shared.take_lease(generation.issued_below_ms()).await {
                Ok(next) => {
                    shared.current.store(Arc::new(next));
                    shared.lock_status().lost = false;
                    Ok(())
                }
                Err(e) => Err(e),
            }
        } else {
            match shared.renew(&generation).await {
                Err(e) if e.code() == Some(calls::SUPERSEDED) => {
                    generation.stop();
                    shared.lock_status().lost = true;
                    Err(e)
                }
                other => other,
            }
        };
        match outcome {
            Ok(()) => {
                failures = backoff();
                wait = period;
            }
            Err(e) => {
                shared.lock_status().last_error = Some(e.to_string());
                wait = failures.delay();
            }
        }
    }
}
