//! Owned shards (`shards = "owned"`): a snowflake namespace whose node field is the data's
//! shard, named by each request, as Instagram's ids carry theirs.
//!
//! Uniqueness needs one issuer per shard at a time, so shards are leased like worker ids, in
//! ranges: range `r` (shards `r*shard_range ..`) is worker id `r` of lease group
//! `<namespace>:shards` ([`idmint_store::WorkerLeases`], every backend), held by one node
//! (`crate::worker::LeasedWorker` with one generator per shard of the range).
//!
//! Invariants:
//! - **one issuer per shard**: a node issues ids of a shard only under its range's lease,
//!   within the lease's limits (the floor recorded ahead, the expiry by the authority's clock
//!   less the safety margin: `crate::worker`). A lease lost is dropped, never renewed again;
//!   the range is taken afresh.
//! - **a takeover starts above every earlier holder**: a range's floor covers every timestamp
//!   its holders issued; the next holder's generators start above it (waiting for it, as for
//!   any worker id).
//! - **taken on first use, by whoever is asked first**: a node asked for a shard of a range
//!   nobody holds takes the range; one held by another node is forwarded to, over gRPC
//!   `Forward` to the url the holder recorded with its lease (`peers.advertise`), one hop: the
//!   node called serves only shards it holds (or takes a free range), never forwards again.
//! - **released at a clean stop** with a floor just above the last timestamp issued, after
//!   every request is gone.
//!
//! Where each range is held is remembered until the holder's lease could have expired, or a
//! forward to it failed; then the range is looked up again (an acquisition attempt).

use crate::config::shards::ShardsConfig;
use crate::config::LeaseSettings;
use crate::error::IdError;
use crate::peers::batch::{self, Batcher};
use crate::peers::{holder_base, url_of, ForwardError, Peers};
use crate::time::SharedClock;
use crate::worker::{LeasedWorker, NodeSpan, WorkerError};
use idmint_core::{Clock, Layout, NamespaceName};
use idmint_proto::v1::{ForwardRequest, ShardPart};
use idmint_store::lease::LeaseError;
use idmint_store::{Authority, WorkerChoice};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Where a shard is served.
#[derive(Debug, Clone)]
pub enum Located {
    /// Here: the range's lease, held by this node.
    Here(Arc<LeasedWorker>),
    /// At the node of this gRPC url, which holds the range's lease.
    At(String),
}

/// What this node knows of one range.
#[derive(Debug, Clone, Default)]
enum RangeState {
    /// Nothing: look it up (try to take it) on the next request.
    #[default]
    Unknown,
    /// Held by this node.
    Held(Arc<LeasedWorker>),
    /// Held by the node at `url`, whose lease runs until at least `until` (monotonic ns).
    Elsewhere { url: String, until: u64 },
}

#[derive(Debug, Default)]
struct Range {
    state: Mutex<RangeState>,
    /// One acquisition of the range at a time on this node; the others wait for its outcome.
    taking: tokio::sync::Mutex<()>,
}

impl Range {
    fn state(&self) -> RangeState {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, state: RangeState) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
    }
}

/// The shard leases of one namespace on this node. See the module docs.
#[derive(Debug)]
pub struct OwnedShards {
    name: NamespaceName,
    group: NamespaceName,
    layout: Layout,
    config: ShardsConfig,
    authority: Arc<dyn Authority>,
    leases: LeaseSettings,
    clock: SharedClock,
    peers: Arc<Peers>,
    holder: String,
    ranges: Vec<Range>,
    stop: watch::Receiver<bool>,
    keepers: Mutex<Vec<JoinHandle<()>>>,
    /// The requests queued for each holder (by url), each tagged with its shard.
    batchers: Mutex<HashMap<String, Arc<Batcher<u64>>>>,
    /// The most ids one forward carries (`server.max_count`, what the holder admits).
    max_batch: u64,
}

/// The lease group of `name`'s shard ranges: `<name>:shards`.
pub fn shard_group(name: &NamespaceName) -> Result<NamespaceName, IdError> {
    Ok(NamespaceName::new(&format!("{name}{SHARDS_SUFFIX}"))?)
}

/// What a shard group's name ends with ([`shard_group`]); no lower tier reaches such a group
/// (the node's `leases::is_internal_group`).
pub const SHARDS_SUFFIX: &str = ":shards";

/// The layout text a shard group records: the layout and how the shards are split, so two
/// namespaces that split them differently never share a group.
pub fn range_layout_text(layout: &Layout, config: &ShardsConfig) -> String {
    format!(
        "{} shards={} shards_per_lease={}",
        crate::worker::layout_text(layout),
        config.logical,
        config.range
    )
}

impl OwnedShards {
    /// The shards of namespace `name` (of `layout`, split as `config` says), leased from
    /// `authority` as `[leases]` says, forwarded through `peers` in batches of at most
    /// `max_batch` ids; range leases are renewed until `stop` turns true.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: NamespaceName,
        layout: Layout,
        config: ShardsConfig,
        authority: Arc<dyn Authority>,
        leases: LeaseSettings,
        clock: SharedClock,
        peers: Arc<Peers>,
        stop: watch::Receiver<bool>,
        max_batch: u64,
    ) -> Result<Arc<OwnedShards>, IdError> {
        let ranges = (0..config.ranges()).map(|_| Range::default()).collect();
        Ok(Arc::new(OwnedShards {
            group: shard_group(&name)?,
            holder: holder_base(&peers.config().advertise),
            name,
            layout,
            config,
            authority,
            leases,
            clock,
            peers,
            ranges,
            stop,
            keepers: Mutex::new(Vec::new()),
            batchers: Mutex::new(HashMap::new()),
            max_batch,
        }))
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The lease group of the ranges.
    pub fn group(&self) -> &NamespaceName {
        &self.group
    }

    /// How the shards are split.
    pub fn config(&self) -> &ShardsConfig {
        &self.config
    }

    /// This node's url as the leases it holds name it (`peers.advertise`).
    pub fn advertise(&self) -> &str {
        &self.peers.config().advertise
    }

    /// How long a request waits for a shard's holder (`peers.wait_ms`).
    pub fn wait(&self) -> Duration {
        self.peers.config().wait
    }

    /// The shard of `key`: `key % logical_shards`, as Instagram maps a user id to its shard.
    pub fn shard_for_key(&self, key: u64) -> u64 {
        key % self.config.logical
    }

    /// `shard`, if the namespace has it; otherwise `invalid_request` naming the bound.
    pub fn check_shard(&self, shard: u64) -> Result<u64, IdError> {
        if shard < self.config.logical {
            return Ok(shard);
        }
        Err(IdError::InvalidRequest(format!(
            "shard {shard} is not a shard of namespace {:?}: it has shards 0 to {} (logical_shards = {})",
            self.name.as_str(),
            self.config.logical - 1,
            self.config.logical
        )))
    }

    fn range(&self, shard: u64) -> Result<&Range, IdError> {
        let r = usize::try_from(self.config.range_of(self.check_shard(shard)?))
            .map_err(|_| IdError::Internal(self.name.to_string()))?;
        self.ranges
            .get(r)
            .ok_or_else(|| IdError::Internal(self.name.to_string()))
    }

    /// The ranges this node holds now, by index.
    pub fn held_ranges(&self) -> Vec<u64> {
        self.held()
            .iter()
            .map(|w| w.current().generator().node() / self.config.range)
            .collect()
    }

    /// The range leases this node holds now.
    pub(crate) fn held(&self) -> Vec<Arc<LeasedWorker>> {
        self.ranges
            .iter()
            .filter_map(|r| match r.state() {
                RangeState::Held(w) if !w.is_lost() => Some(w),
                _ => None,
            })
            .collect()
    }

    /// Where `shard` is served: here if this node holds its range (taking the range if nobody
    /// does), else at the holder's url. `may_forward` false (a forwarded request): a range held
    /// elsewhere is `no_leader`, never forwarded again.
    pub async fn locate(&self, shard: u64, may_forward: bool) -> Result<Located, IdError> {
        let range = self.range(shard)?;
        if let Some(found) = self.known(range, may_forward) {
            return Ok(found);
        }
        let _taking = range.taking.lock().await;
        // Another request may have settled it while this one waited.
        if let Some(found) = self.known(range, may_forward) {
            return Ok(found);
        }
        if *self.stop.borrow() {
            return Err(IdError::ShuttingDown);
        }
        let r = self.config.range_of(shard);
        let taken = LeasedWorker::acquire_span(
            self.group.clone(),
            self.layout,
            WorkerChoice::Exactly(r),
            NodeSpan::Shards(self.config),
            self.holder.clone(),
            self.authority.clone(),
            self.leases,
            self.clock.clone(),
        )
        .await;
        match taken {
            Ok(worker) => {
                let keeper = tokio::spawn(worker.clone().keep(self.stop.clone()));
                self.keepers
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(keeper);
                range.set(RangeState::Held(worker.clone()));
                tracing::info!(namespace = %self.name, range = r, shards = ?self.config.shards_of(r), "took the lease of a shard range");
                Ok(Located::Here(worker))
            }
            Err(WorkerError::Lease { source, .. }) => match *source {
                LeaseError::Held {
                    holder, expires_in, ..
                } => {
                    let Some(url) = url_of(&holder).map(str::to_owned) else {
                        return Err(self.no_holder(
                            shard,
                            format!("its range is leased by {holder}, which names no url"),
                        ));
                    };
                    let until = self.clock.monotonic_nanos().saturating_add(
                        u64::try_from(expires_in.min(self.leases.ttl).as_nanos())
                            .unwrap_or(u64::MAX),
                    );
                    range.set(RangeState::Elsewhere {
                        url: url.clone(),
                        until,
                    });
                    if may_forward {
                        Ok(Located::At(url))
                    } else {
                        Err(self.not_here(shard, &url))
                    }
                }
                e if e.is_unavailable() => Err(IdError::Unavailable {
                    name: self.name.to_string(),
                    reason: format!("the lease of shard {shard}'s range: {e}"),
                }),
                e => Err(IdError::Conflict(format!(
                    "namespace {:?}, the lease of shard {shard}'s range: {e}",
                    self.name.as_str()
                ))),
            },
            Err(e @ WorkerError::ClockBehindFloor { .. }) => Err(IdError::Unavailable {
                name: self.name.to_string(),
                reason: e.to_string(),
            }),
            Err(e) => Err(IdError::Conflict(e.to_string())),
        }
    }

    /// What is known of `range` without asking the authority, if enough.
    fn known(&self, range: &Range, may_forward: bool) -> Option<Located> {
        match range.state() {
            RangeState::Held(w) if !w.is_lost() => Some(Located::Here(w)),
            RangeState::Held(_) => {
                range.set(RangeState::Unknown);
                None
            }
            RangeState::Elsewhere { url, until }
                if may_forward && self.clock.monotonic_nanos() < until =>
            {
                Some(Located::At(url))
            }
            _ => None,
        }
    }

    /// A forward to the holder at `url` failed: look the shard's range up again next time.
    pub fn forget(&self, shard: u64, url: &str) {
        if let Ok(range) = self.range(shard) {
            let mut state = range.state.lock().unwrap_or_else(PoisonError::into_inner);
            if matches!(&*state, RangeState::Elsewhere { url: u, .. } if u == url) {
                *state = RangeState::Unknown;
            }
        }
    }

    /// `count` ids of `shard` from its holder at `url`: queued with the other requests for
    /// that node, and carried by the next forward to it ([`crate::peers::batch`]).
    pub async fn forward(
        self: &Arc<Self>,
        url: &str,
        shard: u64,
        count: u64,
    ) -> Result<Vec<u64>, ForwardError> {
        let batcher = self
            .batchers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(url.to_owned())
            .or_insert_with(|| Arc::new(Batcher::new(self.max_batch)))
            .clone();
        let answer = batcher.enqueue(count, false, shard);
        self.send_batches(&batcher, url);
        answer.await.unwrap_or_else(|_| {
            Err(ForwardError::Retry(
                "the forward carrying the request was dropped".into(),
            ))
        })
    }

    /// Sends every batch a free slot of `batcher` allows, each from its own task (a batch is
    /// answered even if the request that queued it is dropped); a finished forward sends what
    /// queued up meanwhile.
    fn send_batches(self: &Arc<Self>, batcher: &Arc<Batcher<u64>>, url: &str) {
        while let Some((permit, batch)) = batcher.next_batch() {
            let count = batch.iter().map(|w| w.count).sum();
            let request = match &batch[..] {
                [one] => ForwardRequest {
                    namespace: self.name.to_string(),
                    count,
                    consecutive: false,
                    shard: Some(one.tag),
                    parts: Vec::new(),
                    challenge: Vec::new(),
                },
                many => ForwardRequest {
                    namespace: self.name.to_string(),
                    count,
                    consecutive: false,
                    shard: None,
                    parts: many
                        .iter()
                        .map(|w| ShardPart {
                            shard: w.tag,
                            count: w.count,
                        })
                        .collect(),
                    challenge: Vec::new(),
                },
            };
            let (shards, batcher, url) = (self.clone(), batcher.clone(), url.to_owned());
            tokio::spawn(async move {
                let answer = shards.peers.forward(&url, request).await;
                batch::distribute(batch, answer.map(|(ids, _token)| ids));
                drop(permit);
                shards.send_batches(&batcher, &url);
            });
        }
    }

    fn not_here(&self, shard: u64, url: &str) -> IdError {
        self.no_holder(
            shard,
            format!("this node does not hold it; the node at {url} does"),
        )
    }

    fn no_holder(&self, shard: u64, why: String) -> IdError {
        IdError::NoLeader {
            name: self.name.to_string(),
            reason: format!("shard {shard}: {why}"),
        }
    }

    /// Releases every range lease this node holds, each with a floor just above the last
    /// timestamp it issued. Call once every request is gone and the node's stop was sent
    /// (the renewals end with it).
    pub async fn release(&self) {
        let keepers =
            std::mem::take(&mut *self.keepers.lock().unwrap_or_else(PoisonError::into_inner));
        for k in keepers {
            if let Err(e) = k.await {
                tracing::error!(namespace = %self.name, error = %e, "a shard lease's renewal task failed");
            }
        }
        for range in &self.ranges {
            if let RangeState::Held(worker) = range.state() {
                worker.release().await;
            }
            range.set(RangeState::Unknown);
        }
    }
}
