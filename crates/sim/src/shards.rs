//! A shard-owned snowflake namespace (`shards = "owned"`): the node field of every id is the
//! data's shard, named by the request. [`LOGICAL_SHARDS`] shards are leased in ranges of
//! [`SHARD_RANGE`]: range `r` is worker id `r` of the lease group `photos:shards`, a worker
//! lease like any other (the real `plan_acquire` decides every acquisition), whose time floor
//! covers every shard of the range.
//!
//! The model of a node, as the design specifies it:
//! - the first request for a shard of a range it does not know a holder of makes the node
//!   acquire the range; a refused acquisition names the holder, to which the node forwards
//!   (one hop) from then on; the holder answers or refuses, never forwards again;
//! - a holder issues a shard's ids from the real `SnowflakeGenerator`, one per shard, whose
//!   node field is the shard. A new holder waits until its wall clock reaches the floor the
//!   lease was granted with, then starts each shard's generator above that floor;
//! - a holder serves only before its **deadline**: the *send* time of its latest acquisition or
//!   renewal that succeeded, plus the TTL, minus the safety margin, on its own monotonic clock
//!   (which runs within ±10% of the authority's); and only below the floor its latest renewal
//!   recorded (the generators' limit); the floor is recorded [`FLOOR_AHEAD_MS`] ahead;
//! - a renewal answered `Superseded` drops the range; a clean stop releases every range held,
//!   with a floor above every timestamp issued.
//!
//! The world runs this on its own random stream (see `world::shards`), so the rest of the
//! world's runs are the same with or without it.

use crate::clock::{Now, RatedClock, SimClock};
use crate::rng::Rng;
use idmint_core::{Layout, NamespaceName, SnowflakeGenerator};
use idmint_store::lease::{LeaseRequest, WorkerChoice};
use idmint_store::{MemoryAuthority, WorkerLease};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const MS: u64 = 1_000_000;
/// The namespace's logical shards.
pub const LOGICAL_SHARDS: u64 = 32;
/// Shards per range lease.
pub const SHARD_RANGE: u64 = 8;
/// Range leases: worker ids `0..RANGES` of the lease group.
pub const RANGES: usize = LOGICAL_SHARDS.div_ceil(SHARD_RANGE) as usize;
/// A range lease's TTL, by the authority's clock.
pub const TTL: Duration = Duration::from_millis(200);
/// What a holder's deadline keeps short of the TTL: covers clock rates within ±10%.
pub const SAFETY_MARGIN: u64 = 40 * MS;
/// A holder renews this long (on its clock) after the last renewal it sent that succeeded.
pub const RENEW_EVERY: u64 = 50 * MS;
/// How far ahead of its generators' time a renewal records the floor.
pub const FLOOR_AHEAD_MS: u64 = 120;
/// The nodes' timers (renewals, retries, calls given up) run this often.
pub const TICK: u64 = 10 * MS;
/// A call without a reply after this is given up.
pub const TIMEOUT: u64 = 30 * MS;
/// A node that knows no holder of a range it was asked for acquires it at most this often.
pub const RETRY_EVERY: u64 = 20 * MS;
/// A request waiting at a node (for a lease, a floor, a renewal) fails after this.
pub const WAIT_BOUND: u64 = 300 * MS;
/// Clock rates: within ±10% of the authority's, in parts per million.
pub const RATE_SPREAD_PPM: u64 = 100_000;

/// The namespace's layout: Instagram's (its 13-bit node field is the shard).
pub fn layout() -> Layout {
    Layout::instagram()
}

/// The range leases' group.
pub fn group() -> NamespaceName {
    NamespaceName::new("photos:shards").expect("a valid name")
}

/// The range of `shard`.
pub fn range_of(shard: u64) -> usize {
    (shard / SHARD_RANGE) as usize
}

/// Node `i`'s request for range `range` of `group` (a holder unique per acquisition).
pub fn lease_request(
    group: &NamespaceName,
    i: usize,
    epoch: u64,
    nth: u64,
    range: usize,
) -> LeaseRequest {
    LeaseRequest {
        group: group.clone(),
        workers: RANGES as u64,
        choice: WorkerChoice::Exactly(range as u64),
        prefer_floor_at_most: None,
        holder: format!("node-{i} run {epoch} lease {nth}"),
        layout: "instagram".into(),
        ttl: TTL,
    }
}

/// The layout timestamp of `ms` (Unix milliseconds).
pub fn ts_of_ms(ms: u64) -> u64 {
    let l = layout();
    ms.saturating_mul(MS).saturating_sub(l.epoch_nanos()) / l.unit_nanos()
}

/// The shard namespace's messages; `req` names the request a reply answers.
#[derive(Debug, Clone)]
pub(crate) enum ShardMsg {
    /// Node to authority: a range lease.
    Acquire { req: u64, request: LeaseRequest },
    /// The lease, granted.
    Acquired { req: u64, lease: WorkerLease },
    /// The range is held (by this node, if known).
    Held { req: u64, holder: Option<usize> },
    /// A renewal, recording `floor_ms`.
    Renew {
        req: u64,
        lease: WorkerLease,
        floor_ms: u64,
    },
    /// The renewal succeeded: the lease with the floor now recorded.
    Renewed { req: u64, lease: WorkerLease },
    /// The lease was taken over or lost.
    Superseded { req: u64 },
    /// A clean stop's release, with a floor above every timestamp issued.
    Release { lease: WorkerLease, floor_ms: u64 },
    /// Node to holder: a forwarded request.
    Forward { req: u64, shard: u64, count: u64 },
    /// Holder to node: its ids.
    Ids { req: u64, ids: Vec<u64> },
    /// The node asked does not serve the range now.
    Refused { req: u64 },
}

impl ShardMsg {
    /// A code for the trace.
    pub(crate) fn code(&self) -> u64 {
        match self {
            ShardMsg::Acquire { .. } => 1,
            ShardMsg::Acquired { .. } => 2,
            ShardMsg::Held { .. } => 3,
            ShardMsg::Renew { .. } => 4,
            ShardMsg::Renewed { .. } => 5,
            ShardMsg::Superseded { .. } => 6,
            ShardMsg::Release { .. } => 7,
            ShardMsg::Forward { .. } => 8,
            ShardMsg::Ids { .. } => 9,
            ShardMsg::Refused { .. } => 10,
        }
    }
}

/// A client's request waiting at a node, from `start` (world time).
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    /// The shard asked for.
    pub shard: u64,
    /// Ids asked for.
    pub count: u64,
    /// When it arrived.
    pub start: u64,
}

/// One range as a node knows it.
#[derive(Debug, Default)]
pub struct RangeState {
    /// The lease held.
    pub lease: Option<WorkerLease>,
    /// The floor the lease was granted with: every earlier holder issued below it.
    pub granted_floor_ms: u64,
    /// The floor the latest successful renewal recorded: the generators' limit.
    pub recorded_floor_ms: u64,
    /// The deadline on the node's monotonic clock.
    pub deadline: u64,
    /// Node-clock send time of the latest acquisition or renewal that succeeded.
    pub renewed_sent: u64,
    /// An acquisition in flight: request id, node-clock send time, world time.
    pub acquiring: Option<(u64, u64, u64)>,
    /// A renewal in flight: request id, node-clock send time, world time.
    pub renewing: Option<(u64, u64, u64)>,
    /// The holder as last learnt (another node).
    pub hint: Option<usize>,
    /// World time of the latest acquisition sent.
    pub tried_at: u64,
    /// Per shard of the range held: its generator.
    pub generators: BTreeMap<u64, SnowflakeGenerator<RatedClock>>,
    /// Requests at this node waiting for the range.
    pub waiting: Vec<Pending>,
}

impl RangeState {
    /// The lease is lost or given up: no issuing until the next acquisition.
    pub fn drop_lease(&mut self) {
        for g in self.generators.values() {
            g.set_limit(0);
        }
        self.generators.clear();
        self.lease = None;
        self.renewing = None;
        self.deadline = 0;
    }

    /// An acquisition or renewal sent at `sent_local` succeeded: the deadline moves to its send
    /// time plus the TTL minus the safety margin (never back).
    pub fn extend(&mut self, sent_local: u64) {
        let ttl = u64::try_from(TTL.as_nanos()).unwrap_or(u64::MAX);
        self.renewed_sent = self.renewed_sent.max(sent_local);
        self.deadline = self.deadline.max(sent_local + ttl - SAFETY_MARGIN);
    }

    /// A floor above every timestamp this holder issued and at or above the one it was granted:
    /// what a clean stop releases with.
    pub fn release_floor_ms(&self) -> u64 {
        let l = layout();
        self.generators
            .values()
            .filter_map(SnowflakeGenerator::last_timestamp)
            .map(|ts| l.unix_nanos_of(ts + 1) / MS + 1)
            .fold(self.granted_floor_ms, u64::max)
    }
}

/// One node's shard namespace.
#[derive(Debug)]
pub struct ShardNode {
    /// Its clock: monotonic at its own rate, wall with its own skew.
    pub clock: RatedClock,
    /// Paused (a stopped process: nothing runs, messages wait) until this world time.
    pub paused_until: u64,
    /// Restarts so far.
    pub epoch: u64,
    /// Acquisitions sent so far.
    pub acquisitions: u64,
    /// Per range.
    pub ranges: Vec<RangeState>,
    /// Requests forwarded to a holder, by request id, with the world time they were sent.
    pub forwarded: BTreeMap<u64, (Pending, u64)>,
}

impl ShardNode {
    /// A node on `now` with its clock's rate, origin and skew drawn from `rng`.
    pub fn new(now: &Now, rng: &mut Rng) -> Self {
        let rate_ppm = rng.range(1_000_000 - RATE_SPREAD_PPM, 1_000_000 + RATE_SPREAD_PPM);
        let offset = rng.range(0, 1_000 * MS);
        let skew = rng.range(0, 60 * MS) as i64 - (30 * MS) as i64;
        ShardNode {
            clock: RatedClock::new(now.clone(), rate_ppm, offset, skew),
            paused_until: 0,
            epoch: 0,
            acquisitions: 0,
            ranges: (0..RANGES).map(|_| RangeState::default()).collect(),
            forwarded: BTreeMap::new(),
        }
    }

    /// Everything but the clock is lost (a crash or a restart).
    pub fn reset(&mut self) {
        for r in &mut self.ranges {
            r.drop_lease();
        }
        *self = ShardNode {
            clock: self.clock.clone(),
            paused_until: 0,
            epoch: self.epoch + 1,
            acquisitions: 0,
            ranges: (0..RANGES).map(|_| RangeState::default()).collect(),
            forwarded: BTreeMap::new(),
        };
    }
}

/// The shard namespace of one run: its own random stream, the authority holding its range
/// leases, every node's side of it, and its counters.
#[derive(Debug)]
pub struct Shards {
    /// Every random choice of the shard namespace (the world's own stream is untouched).
    pub rng: Rng,
    /// The authority holding the range leases (the real in-memory one).
    pub leases: MemoryAuthority,
    /// The range leases' group.
    pub group: NamespaceName,
    /// Per node.
    pub nodes: Vec<ShardNode>,
    /// World time the nodes' timers run next.
    pub next_tick: u64,
    /// Answers that reached their client.
    pub answered: u64,
    /// Of them, answers a holder sent back to the node that forwarded the request.
    pub forwarded_answers: u64,
    /// Requests that failed (refused, timed out, no holder).
    pub failed: u64,
    next_req: u64,
}

impl Shards {
    /// The shard namespace for `seed`, with `nodes` nodes on world time `now`, its authority
    /// on `clock`.
    pub fn new(seed: u64, nodes: usize, now: &Now, clock: &SimClock) -> Self {
        let mut rng = Rng::new(seed ^ 0x54a2_d5ee_d000_0002);
        let nodes = (0..nodes).map(|_| ShardNode::new(now, &mut rng)).collect();
        Shards {
            rng,
            leases: MemoryAuthority::with_clock(Arc::new(clock.clone())),
            group: group(),
            nodes,
            next_tick: 0,
            answered: 0,
            forwarded_answers: 0,
            failed: 0,
            next_req: 0,
        }
    }

    /// A fresh request id.
    pub fn req(&mut self) -> u64 {
        self.next_req += 1;
        self.next_req
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_map_to_ranges_that_cover_them_all() {
        assert_eq!(RANGES, 4);
        assert_eq!(range_of(0), 0);
        assert_eq!(range_of(SHARD_RANGE - 1), 0);
        assert_eq!(range_of(SHARD_RANGE), 1);
        assert_eq!(range_of(LOGICAL_SHARDS - 1), RANGES - 1);
        assert!(LOGICAL_SHARDS - 1 <= layout().max_node());
    }

    #[test]
    fn a_deadline_ends_short_of_the_ttl_after_the_send_and_only_grows() {
        let mut r = RangeState::default();
        r.extend(1_000 * MS);
        assert_eq!(r.deadline, 1_160 * MS);
        r.extend(990 * MS);
        assert_eq!(r.deadline, 1_160 * MS);
        assert_eq!(r.renewed_sent, 1_000 * MS);
    }

    #[test]
    fn the_slowest_clock_allowed_reaches_its_deadline_before_the_authority_expires_the_lease() {
        let now = Now::default();
        let slow = RatedClock::new(now, 1_000_000 - RATE_SPREAD_PPM, 0, 0);
        let ttl = u64::try_from(TTL.as_nanos()).unwrap_or(u64::MAX);
        let real_end = (ttl - SAFETY_MARGIN) * 1_000_000 / (1_000_000 - RATE_SPREAD_PPM);
        assert!(real_end < ttl, "{real_end} >= {ttl}");
        assert!(slow.local(real_end + MS) >= ttl - SAFETY_MARGIN);
    }

    #[test]
    fn a_release_floor_is_above_every_timestamp_issued_and_the_granted_floor() {
        let now = Now::default();
        now.advance(5_000 * MS);
        let clock = RatedClock::new(now.clone(), 1_000_000, 0, 0);
        let mut r = RangeState {
            granted_floor_ms: 7,
            ..RangeState::default()
        };
        assert_eq!(r.release_floor_ms(), 7);
        let g = SnowflakeGenerator::new(layout(), 3, clock, None).expect("a generator");
        let mut ids = Vec::new();
        g.next_ids(2, &mut ids).expect("ids");
        let last_ms = layout().decode(ids[1]).expect("decodes").unix_millis();
        r.generators.insert(3, g);
        assert!(r.release_floor_ms() > last_ms);
        assert!(
            ts_of_ms(r.release_floor_ms())
                > layout().decode(ids[1]).expect("decodes").parts.timestamp
        );
    }
}
