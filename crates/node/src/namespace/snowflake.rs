//! Snowflake namespaces: ids from a leased generator. The node field is either this node's
//! worker id (one worker lease per lease group, `crate::worker`) or, with `shards = "owned"`,
//! the data's shard each request names (one range lease per range of shards, held by one node
//! at a time and forwarded to by the others, [`crate::shards`]).
//!
//! Invariants: every id comes from a generator of a lease this node holds, checked against
//! the lease's limit as it is issued; a request's ids come from one generation (a lease lost
//! meanwhile ends it with 503); an owned shard's ids carry that shard, whichever node issued
//! them (a forwarded answer is checked before a caller sees it).

use super::headroom::SequenceUse;
use super::rfc3339_ms;
use crate::error::IdError;
use crate::metrics::{Metrics, NamespaceLabels};
use crate::peers::ForwardError;
use crate::shards::{Located, OwnedShards};
use crate::worker::{Generation, LeasedWorker};
use idmint_api as api;
use idmint_core::snowflake::ClockCheck;
use idmint_core::{Backoff, Layout, NamespaceName, NextIdError};
use prometheus_client::metrics::counter::Counter;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where a snowflake namespace's node field comes from.
#[derive(Debug)]
pub enum Issuer {
    /// This node's worker lease of the namespace's group.
    Worker(Arc<LeasedWorker>),
    /// The request's shard, leased in ranges.
    Shards(Arc<OwnedShards>),
}

/// A snowflake namespace. See the module docs.
#[derive(Debug)]
pub struct SnowflakeNamespace {
    name: NamespaceName,
    layout: Layout,
    issuer: Issuer,
    metrics: Arc<Metrics>,
    labels: NamespaceLabels,
    served: AtomicU64,
    /// The peak ids per time unit its requests saw ([`headroom`]).
    sequence: SequenceUse,
    /// `idmint_snowflake_sequence_exhausted_total` of this namespace.
    exhausted: Counter,
}

/// Waits shorter than this for the next time unit are spun through, yielding to other tasks,
/// rather than slept: tokio's timer has a resolution of 1 ms, so a 0.2 ms wait slept would
/// leave most of the next millisecond unit unused (a twitter-layout batch request reached only
/// 0.76 of the 4,096-per-ms limit that way).
const SPIN_BELOW: Duration = Duration::from_millis(1);

/// Waits `wait` for the generator's next time unit. A short wait is spun through on the real
/// monotonic clock once; if the generator is still exhausted afterwards (its clock did not
/// move: tokio's paused time in tests), the next wait sleeps on tokio's clock, which such a
/// clock follows. `spun` records which of the two came last; a request resets it once it got
/// ids.
async fn wait_for_next_unit(wait: Duration, spun: &mut bool) {
    if wait < SPIN_BELOW && !*spun {
        *spun = true;
        let until = std::time::Instant::now() + wait;
        while std::time::Instant::now() < until {
            tokio::task::yield_now().await;
        }
    } else {
        *spun = false;
        tokio::time::sleep(wait).await;
    }
}

impl SnowflakeNamespace {
    /// A namespace issuing ids from `worker`'s generator.
    pub fn new(name: NamespaceName, worker: Arc<LeasedWorker>, metrics: Arc<Metrics>) -> Self {
        let layout = *worker.layout();
        Self::with_issuer(name, layout, Issuer::Worker(worker), metrics)
    }

    /// A namespace whose node field is the shard each request names, leased by `shards`.
    pub fn with_shards(
        name: NamespaceName,
        shards: Arc<OwnedShards>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let layout = *shards.layout();
        Self::with_issuer(name, layout, Issuer::Shards(shards), metrics)
    }

    fn with_issuer(
        name: NamespaceName,
        layout: Layout,
        issuer: Issuer,
        metrics: Arc<Metrics>,
    ) -> Self {
        let labels = NamespaceLabels {
            namespace: name.to_string(),
        };
        let exhausted = metrics
            .snowflake_sequence_exhausted
            .get_or_create(&labels)
            .clone();
        if let Issuer::Shards(_) = &issuer {
            // From 0, so a rate of failures is defined before the first one.
            drop(metrics.shard_forwards.get_or_create(&labels));
            drop(metrics.shard_forward_failures.get_or_create(&labels));
        }
        SnowflakeNamespace {
            labels,
            name,
            sequence: SequenceUse::new(&layout),
            layout,
            issuer,
            metrics,
            served: AtomicU64::new(0),
            exhausted,
        }
    }

    /// The worker lease and generator it issues with (`None`: its shards are owned).
    pub fn worker(&self) -> Option<&Arc<LeasedWorker>> {
        match &self.issuer {
            Issuer::Worker(w) => Some(w),
            Issuer::Shards(_) => None,
        }
    }

    /// Its shard leases, when its node field is the request's shard.
    pub fn owned_shards(&self) -> Option<&Arc<OwnedShards>> {
        match &self.issuer {
            Issuer::Worker(_) => None,
            Issuer::Shards(s) => Some(s),
        }
    }

    /// The namespace's name.
    pub fn name(&self) -> &NamespaceName {
        &self.name
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Ids served.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// `count` increasing ids of this node's worker, sleeping (asynchronously) through
    /// exhausted time units. A namespace whose shards are owned needs the request's shard
    /// ([`SnowflakeNamespace::ids_of_shard`]).
    pub async fn ids(&self, count: u64) -> Result<Vec<u64>, IdError> {
        match &self.issuer {
            Issuer::Worker(worker) => {
                let generation = worker.current().clone();
                let (ids, _) = self.issue(worker, &generation, None, count).await?;
                Ok(ids)
            }
            Issuer::Shards(_) => Err(IdError::InvalidRequest(format!(
                "namespace {:?} has shards = \"owned\": its ids carry the data's shard, so a \
                 request names it (shard, or a key mapped to one)",
                self.name.as_str()
            ))),
        }
    }

    /// `count` increasing ids carrying `shard`: issued here while this node holds the shard's
    /// range lease (taking it on first use), else forwarded to the node that holds it. Waits up
    /// to `peers.wait_ms` for a holder (a takeover after a holder died), then `no_leader`.
    pub async fn ids_of_shard(&self, shard: u64, count: u64) -> Result<Vec<u64>, IdError> {
        let shards = self.shards_or_refuse()?;
        shards.check_shard(shard)?;
        let wait = shards.wait();
        let give_up = tokio::time::Instant::now() + wait;
        let mut backoff = Backoff::new(Duration::from_millis(5), Duration::from_millis(200));
        loop {
            let why = match shards.locate(shard, true).await? {
                Located::Here(worker) => {
                    let generation = worker.current().clone();
                    match self.issue(&worker, &generation, Some(shard), count).await {
                        // Lost meanwhile: locate the shard again.
                        Err(_) if worker.is_lost() => {
                            "this node's lease of the shard was lost".into()
                        }
                        other => return other.map(|(ids, _)| ids),
                    }
                }
                Located::At(url) => {
                    self.metrics
                        .shard_forwards
                        .get_or_create(&self.labels)
                        .inc();
                    match shards.forward(&url, shard, count).await {
                        Ok(ids) => return self.checked(shard, ids, count),
                        Err(ForwardError::Answer { code, message }) => {
                            return Err(self.holder_error(&code, message))
                        }
                        Err(ForwardError::Retry(reason)) => {
                            self.metrics
                                .shard_forward_failures
                                .get_or_create(&self.labels)
                                .inc();
                            shards.forget(shard, &url);
                            reason
                        }
                    }
                }
            };
            let now = tokio::time::Instant::now();
            if now >= give_up {
                return Err(IdError::NoLeader {
                    name: self.name.to_string(),
                    reason: format!(
                        "no holder of shard {shard} answered within {} ms (peers.wait_ms): {why}",
                        wait.as_millis()
                    ),
                });
            }
            tokio::time::sleep_until((now + backoff.delay()).min(give_up)).await;
        }
    }

    /// A forward from another node for `parts` (each a shard and a count, in order): served
    /// only while this node holds each shard's range (taking it if nobody does), never
    /// forwarded again (one hop); all or none. Returns the ids, part after part, and the
    /// largest fencing token of the range leases they were issued under.
    pub async fn serve_forwarded(&self, parts: &[(u64, u64)]) -> Result<(Vec<u64>, u64), IdError> {
        let shards = self.shards_or_refuse()?;
        let mut ids = Vec::new();
        let mut token = 0;
        for &(shard, count) in parts {
            shards.check_shard(shard)?;
            match shards.locate(shard, false).await? {
                Located::Here(worker) => {
                    let generation = worker.current().clone();
                    let (issued, t) = self.issue(&worker, &generation, Some(shard), count).await?;
                    ids.extend(issued);
                    token = token.max(t);
                }
                Located::At(url) => {
                    return Err(IdError::NoLeader {
                        name: self.name.to_string(),
                        reason: format!(
                            "this node does not hold shard {shard}; the node at {url} does"
                        ),
                    })
                }
            }
        }
        Ok((ids, token))
    }

    /// The error a shard's holder answered, as this node answers it.
    fn holder_error(&self, code: &str, message: String) -> IdError {
        match code {
            "time_exhausted" => IdError::TimeExhausted(self.name.to_string()),
            "invalid_count" => IdError::InvalidCount(message),
            _ => IdError::NoLeader {
                name: self.name.to_string(),
                reason: format!("{message} ({code})"),
            },
        }
    }

    fn shards_or_refuse(&self) -> Result<&Arc<OwnedShards>, IdError> {
        self.owned_shards().ok_or_else(|| {
            IdError::InvalidRequest(format!(
                "namespace {:?} does not take a shard or key: its ids' node field is this \
                 node's worker id (only a snowflake namespace with shards = \"owned\" takes one)",
                self.name.as_str()
            ))
        })
    }

    /// A holder's answer for `shard`, checked before a caller sees it: at most `count` ids,
    /// strictly increasing, every one of this layout and carrying `shard`.
    fn checked(&self, shard: u64, ids: Vec<u64>, count: u64) -> Result<Vec<u64>, IdError> {
        let fits = !ids.is_empty()
            && ids.len() as u64 <= count
            && ids.windows(2).all(|w| w[0] < w[1])
            && ids
                .iter()
                .all(|&id| self.layout.decode(id).is_ok_and(|d| d.parts.node == shard));
        if fits {
            return Ok(ids);
        }
        tracing::error!(namespace = %self.name, shard, ids = ids.len(), count, "a shard's holder answered ids of another shard or out of order; refused");
        Err(IdError::NoLeader {
            name: self.name.to_string(),
            reason: format!(
                "the holder of shard {shard} answered ids of another shard or out of order"
            ),
        })
    }

    /// `count` ids from `generation` of `worker` (of node-field value `node`, or its first),
    /// sleeping (asynchronously) through exhausted time units, and the lease's token.
    async fn issue(
        &self,
        worker: &LeasedWorker,
        generation: &Generation,
        node: Option<u64>,
        count: u64,
    ) -> Result<(Vec<u64>, u64), IdError> {
        worker.refresh_clock();
        let generator = match node {
            None => generation.generator(),
            Some(n) => generation
                .generator_for(n)
                .ok_or_else(|| worker.not_issuing(&self.name))?,
        };
        let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(1 << 20));
        let mut remaining = count;
        let layout = generator.layout();
        let mut spun = false;
        while remaining > 0 {
            match generator.next_ids(remaining, &mut out) {
                Ok(n) => {
                    remaining -= n;
                    spun = false;
                    // The ids just taken are of one unit; the last one's sequence + 1 is what
                    // the worker issued in that unit so far (one generator: the worker's).
                    if node.is_none() {
                        if let Some(d) = out.last().and_then(|&id| layout.decode(id).ok()) {
                            self.sequence
                                .record(d.parts.timestamp, d.parts.sequence + 1);
                        }
                    }
                }
                Err(NextIdError::SequenceExhausted { wait }) => {
                    if let (None, Some(unit)) = (node, generator.last_timestamp()) {
                        self.sequence.record_exhausted(unit);
                    }
                    self.exhausted.inc();
                    wait_for_next_unit(wait, &mut spun).await
                }
                Err(NextIdError::BeyondLimit { .. }) => return Err(worker.not_issuing(&self.name)),
                Err(_) => return Err(IdError::TimeExhausted(self.name.to_string())),
            }
        }
        self.served.fetch_add(count, Ordering::Relaxed);
        self.metrics
            .ids_served
            .get_or_create(&self.labels)
            .inc_by(count);
        Ok((out, generation.token()))
    }

    /// What only the authority knows, read from its leases of the namespace's group within
    /// `timeout`: the worker pool (`None`: no leases, a fixed worker id on an authority without
    /// them) and, with owned shards, the shard map. A read; a failure or timeout is reported
    /// in their `error`.
    pub async fn live_state(
        &self,
        authority: &dyn idmint_store::Authority,
        timeout: Duration,
    ) -> (Option<api::WorkerPool>, Option<api::ShardMap>) {
        // A node holds a lease exactly when its authority stores them (worker.rs).
        let Some(leases) = authority.worker_leases() else {
            return (None, None);
        };
        let (group, possible) = match &self.issuer {
            Issuer::Worker(w) => (w.group(), self.layout.max_node().saturating_add(1)),
            Issuer::Shards(s) => (s.group(), s.config().ranges()),
        };
        let (slots, error) = match tokio::time::timeout(timeout, leases.group(group)).await {
            Ok(Ok(Some((_, slots)))) => (Some(slots), None),
            Ok(Ok(None)) => (Some(Vec::new()), None),
            Ok(Err(e)) => (None, Some(e.to_string())),
            Err(_) => (
                None,
                Some(format!(
                    "the {} authority did not answer within {}",
                    authority.kind(),
                    humantime::format_duration(timeout)
                )),
            ),
        };
        let live = |slots: &[idmint_store::lease::WorkerSlot]| {
            slots
                .iter()
                .filter(|s| s.is_live())
                .cloned()
                .collect::<Vec<_>>()
        };
        let live = slots.as_deref().map(live);
        let held = live
            .as_ref()
            .map(|l| u64::try_from(l.len()).unwrap_or(u64::MAX));
        let pool = api::WorkerPool::new(group.to_string(), possible, held, error.clone());
        let map = self.owned_shards().map(|shards| {
            let config = shards.config();
            let ranges = live
                .iter()
                .flatten()
                .filter_map(|slot| {
                    let holder = crate::peers::url_of(&slot.holder)?.to_owned();
                    let covered = config.shards_of(slot.worker);
                    let last_shard = covered.end.checked_sub(1)?;
                    Some(api::ShardRangeHolder {
                        range: slot.worker,
                        first_shard: covered.start,
                        last_shard,
                        holder,
                    })
                })
                .collect();
            api::ShardMap {
                logical_shards: config.logical,
                shard_range: config.range,
                this_node: shards.advertise().to_owned(),
                ranges,
                error,
            }
        });
        (Some(pool), map)
    }

    /// The sequence headroom of this node's worker as of now ([`super::headroom`]; `None`
    /// for owned shards, each a sequence of its own).
    pub fn sequence_headroom(&self) -> Option<api::SequenceHeadroom> {
        let worker = self.worker()?;
        let generation = worker.current();
        let g = generation.generator();
        Some(
            self.sequence
                .report(g.timestamp_at_unix_nanos(g.now_unix_nanos())),
        )
    }

    pub(super) fn info(&self, namespace: String, now: SystemTime) -> api::NamespaceInfo {
        let generation = self.worker().map(|w| w.current());
        let g = generation.as_ref().map(|g| g.generator());
        let l = &self.layout;
        let spec = l.spec();
        let end_nanos = l.end_of_time_nanos();
        let now_nanos = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        api::NamespaceInfo::Snowflake {
            namespace,
            settings: api::SnowflakeSettings {
                worker: g.map_or(0, |g| g.node()),
                layout: api::LayoutSettings {
                    timestamp_bits: spec.timestamp_bits,
                    node_bits: spec.node_bits,
                    sequence_bits: spec.sequence_bits,
                    time_unit: humantime::format_duration(spec.time_unit).to_string(),
                    time_unit_ns: l.unit_nanos(),
                    max_bits: spec.max_bits,
                    epoch: rfc3339_ms(spec.epoch_unix_ms),
                    epoch_unix_ms: spec.epoch_unix_ms,
                    order: match spec.order {
                        idmint_core::FieldOrder::NodeThenSequence => {
                            api::FieldOrder::NodeThenSequence
                        }
                        idmint_core::FieldOrder::SequenceThenNode => {
                            api::FieldOrder::SequenceThenNode
                        }
                    },
                    node_field: match l.node_field() {
                        idmint_core::NodeField::Worker => api::NodeField::Worker,
                        idmint_core::NodeField::Shard => api::NodeField::Shard,
                    },
                },
            },
            state: api::SnowflakeState {
                ids_served: self.served(),
                last_timestamp: g.and_then(|g| g.last_timestamp()),
                time_runs_out: rfc3339_ms(end_nanos / 1_000_000),
                seconds_to_exhaustion: end_nanos.saturating_sub(now_nanos) / 1_000_000_000,
                worker_pool: None,
                sequence_headroom: self.sequence_headroom(),
                worker_lease: self.worker().and_then(|w| w.lease_state()),
                shards: None,
            },
        }
    }

    /// Compares the wall clock with the generators' time; logs and records steps.
    pub fn check_clock(&self) {
        let worker = match &self.issuer {
            Issuer::Worker(w) => Some(w.clone()),
            Issuer::Shards(s) => s.held().into_iter().next(),
        };
        let Some(worker) = worker else {
            return;
        };
        let check = worker
            .current()
            .generator()
            .check_clock(Duration::from_millis(5));
        match check {
            ClockCheck::InStep => {
                self.metrics
                    .clock_behind
                    .get_or_create(&self.labels)
                    .set(0.0);
            }
            ClockCheck::WallBehind { by } => {
                self.metrics
                    .clock_behind
                    .get_or_create(&self.labels)
                    .set(by.as_secs_f64());
                tracing::warn!(namespace = %self.name, behind = ?by, "wall clock stepped backwards; keeping monotonic time, ids stay increasing");
            }
            ClockCheck::WallAheadAdopted { by } => {
                tracing::info!(namespace = %self.name, ahead = ?by, "wall clock stepped forwards; generator time moved forward");
            }
        }
    }
}
