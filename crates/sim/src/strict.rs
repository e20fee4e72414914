//! A strict sequence namespace (`order = "strict"`): ids that increase across every node in
//! real time. One node is the leader: it holds the worker lease of group `strict:leader` (one
//! worker id) in the namespace's authority, and serves every request; followers forward theirs.
//!
//! The model of a node, as the node implements it:
//! - a **term** starts with an acquisition and lasts, on the node's own monotonic clock, until
//!   the acquisition's (or the latest successful renewal's) *send* time plus the TTL minus the
//!   safety margin; a renewal that succeeds extends it;
//! - before serving in a term, the leader reads the authority's watermark `W` and raises its
//!   buffer's floor to it (burning every id buffered before the term); it then serves from
//!   blocks reserved from the authority, all above `W`;
//! - the leader takes ids from its buffer, then checks its clock against the deadline: past
//!   it, the request is refused and its ids burned (the node puts them back instead, which its
//!   buffer allows only when nothing was taken since, so they stay below every later answer;
//!   burning them is the simpler of two safe choices);
//! - followers batch their callers into one forward and split the ids in order; a forward to a
//!   node that is not serving is refused, the follower re-discovers the leader (an acquisition
//!   attempt: the lease, or the holder's name) and retries up to [`FORWARD_TRIES`] times, then its callers fail; a node never
//!   serves a strict request from ids of its own;
//! - a clean stop stops serving, gives the unused tail back by compare-and-swap, and releases
//!   the lease.
//!
//! The world runs this on its own random stream (see `world::strict`), so the rest of the
//! world's runs are the same with or without it.

use crate::clock::{ready, SimClock};
use crate::linearizable::Op;
use crate::rng::Rng;
use idmint_core::{
    Block, Buffer, BufferConfig, BufferPolicy, NamespaceName, SequenceSpec, Sizing, Width,
};
use idmint_store::lease::{LeaseRequest, WorkerChoice};
use idmint_store::{Authority, MemoryAuthority, WorkerLease};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

const MS: u64 = 1_000_000;
/// The leader lease's TTL, by the authority's clock.
pub const TTL: Duration = Duration::from_millis(100);
/// What a term's deadline keeps short of the TTL: covers clock rates within ±10%.
pub const SAFETY_MARGIN: u64 = 20 * MS;
/// A leader renews this long (on its clock) after the last renewal it sent that succeeded.
pub const RENEW_EVERY: u64 = 25 * MS;
/// A call to the authority or the leader without a reply after this is given up.
pub const TIMEOUT: u64 = 30 * MS;
/// A node that knows no leader tries to acquire the lease this often (five times less often
/// if it knows one): a follower learns the leader from a refused acquisition.
pub const RETRY_EVERY: u64 = 20 * MS;
/// Attempts of one forwarded batch before its callers fail.
pub const FORWARD_TRIES: u32 = 4;
/// A caller waiting at a lease holder that cannot serve fails after this.
pub const WAIT_BOUND: u64 = 300 * MS;
/// Clock rates: within ±10% of the authority's, in parts per million.
pub const RATE_SPREAD_PPM: u64 = 100_000;

/// The strict namespace.
pub fn ns() -> NamespaceName {
    NamespaceName::new("strict").expect("a valid name")
}

/// The leader lease's group.
pub fn leader_group() -> NamespaceName {
    NamespaceName::new("strict:leader").expect("a valid name")
}

/// Node `i`'s request for the leader lease (a holder unique per acquisition).
pub fn lease_request(i: usize, epoch: u64, term: u64) -> LeaseRequest {
    LeaseRequest {
        group: leader_group(),
        workers: 1,
        choice: WorkerChoice::Exactly(0),
        prefer_floor_at_most: None,
        holder: format!("node-{i} run {epoch} term {term}"),
        layout: "strict".into(),
        ttl: TTL,
    }
}

/// The node named by a lease holder.
pub fn node_of(holder: &str) -> Option<usize> {
    holder
        .strip_prefix("node-")?
        .split(' ')
        .next()?
        .parse()
        .ok()
}

/// The strict messages, between nodes and to the authority; `req` names the request a reply
/// answers.
#[derive(Debug, Clone)]
pub(crate) enum StrictMsg {
    /// Node to authority: the leader lease.
    Acquire { req: u64, request: LeaseRequest },
    /// The lease, granted.
    Acquired { req: u64, lease: WorkerLease },
    /// The lease is held (by this node, if known).
    Held { req: u64, leader: Option<usize> },
    /// A renewal.
    Renew { req: u64, lease: WorkerLease },
    /// The renewal succeeded.
    Renewed { req: u64 },
    /// The lease was taken over or lost.
    Superseded { req: u64 },
    /// A read of the watermark.
    ReadWatermark { req: u64 },
    /// The watermark.
    Watermark { req: u64, watermark: u64 },
    /// A refill.
    Reserve { req: u64, count: u64 },
    /// Its block.
    Granted { req: u64, block: Block },
    /// A clean stop: the tail back (compare-and-swap), then the lease released.
    Stop {
        req: u64,
        tail: Option<Block>,
        lease: WorkerLease,
    },
    /// Follower to leader: a batch of callers' counts.
    Forward { req: u64, counts: Vec<u64> },
    /// Leader to follower: the batch's ids, in order.
    Ids { req: u64, ids: Vec<u64> },
    /// The node asked is not serving.
    NotLeader { req: u64 },
}

impl StrictMsg {
    /// A code for the trace.
    pub(crate) fn code(&self) -> u64 {
        match self {
            StrictMsg::Acquire { .. } => 1,
            StrictMsg::Acquired { .. } => 2,
            StrictMsg::Held { .. } => 3,
            StrictMsg::Renew { .. } => 4,
            StrictMsg::Renewed { .. } => 5,
            StrictMsg::Superseded { .. } => 6,
            StrictMsg::ReadWatermark { .. } => 7,
            StrictMsg::Watermark { .. } => 8,
            StrictMsg::Reserve { .. } => 9,
            StrictMsg::Granted { .. } => 10,
            StrictMsg::Stop { .. } => 11,
            StrictMsg::Forward { .. } => 12,
            StrictMsg::Ids { .. } => 13,
            StrictMsg::NotLeader { .. } => 14,
        }
    }
}

/// A client request waiting at a node, from `start` (world time).
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    /// When it arrived.
    pub start: u64,
    /// Ids asked for.
    pub count: u64,
}

/// Callers forwarded together.
#[derive(Debug, Clone)]
pub struct Batch {
    /// In order: the ids are split in this order.
    pub callers: Vec<Caller>,
    /// Where it went (`None`: waiting for a leader to be discovered).
    pub to: Option<usize>,
    /// When it was last sent (world time).
    pub sent: u64,
    /// Attempts so far.
    pub tries: u32,
}

/// A forward queued at the leader until its buffer holds enough.
#[derive(Debug, Clone, Copy)]
pub struct Queued {
    /// The follower.
    pub from: usize,
    /// Its forward.
    pub req: u64,
    /// Ids in all.
    pub total: u64,
}

/// One node's strict namespace.
#[derive(Debug)]
pub struct StrictNode {
    /// Its monotonic clock's rate against the world's, in parts per million.
    pub rate_ppm: u64,
    /// Its monotonic clock's reading at world time 0.
    pub offset: u64,
    /// Paused (a stopped process: nothing runs, messages wait) until this world time.
    pub paused_until: u64,
    /// Restarts so far.
    pub epoch: u64,
    /// Acquisitions sent so far.
    pub terms: u64,
    /// The real buffer.
    pub buffer: Buffer,
    /// The leader lease held.
    pub lease: Option<WorkerLease>,
    /// The term's deadline on the node's clock.
    pub deadline: u64,
    /// The floor was raised to the watermark in this term.
    pub ready: bool,
    /// An acquisition in flight: request id, send time on the node's clock, world time.
    pub acquiring: Option<(u64, u64, u64)>,
    /// A renewal in flight: the same.
    pub renewing: Option<(u64, u64, u64)>,
    /// Node-clock send time of the last acquisition or renewal that succeeded.
    pub renewed_sent: u64,
    /// A watermark read in flight: request id, world time.
    pub reading: Option<(u64, u64)>,
    /// A refill in flight: request id, world time.
    pub refill: Option<(u64, u64)>,
    /// Callers at this node not yet served or forwarded.
    pub waiting: Vec<Caller>,
    /// Forwards queued at this leader.
    pub queued: Vec<Queued>,
    /// The batch this follower forwarded (one at a time), with its request id.
    pub forward: Option<(u64, Batch)>,
    /// The leader as last learnt.
    pub hint: Option<usize>,
    /// World time of the latest acquisition sent.
    pub tried_at: u64,
}

/// The strict buffer's policy: small fixed blocks, so refills and burns are frequent.
pub fn policy() -> BufferPolicy {
    BufferPolicy::new(BufferConfig {
        sizing: Sizing::Fixed(16),
        low_water: 0.5,
        demand_window: Duration::from_secs(1),
    })
    .expect("a valid policy")
}

impl StrictNode {
    /// A node with its clock's rate and offset drawn from `rng`.
    pub fn new(rng: &mut Rng) -> Self {
        let rate_ppm = rng.range(1_000_000 - RATE_SPREAD_PPM, 1_000_000 + RATE_SPREAD_PPM);
        let offset = rng.range(0, 1_000 * MS);
        Self::with_clock(rate_ppm, offset)
    }

    fn with_clock(rate_ppm: u64, offset: u64) -> Self {
        StrictNode {
            rate_ppm,
            offset,
            paused_until: 0,
            epoch: 0,
            terms: 0,
            buffer: Buffer::new(policy()),
            lease: None,
            deadline: 0,
            ready: false,
            acquiring: None,
            renewing: None,
            renewed_sent: 0,
            reading: None,
            refill: None,
            waiting: Vec::new(),
            queued: Vec::new(),
            forward: None,
            hint: None,
            tried_at: 0,
        }
    }

    /// Its monotonic clock at world time `now`.
    pub fn local(&self, now: u64) -> u64 {
        // Within u64 for runs of up to hours of simulated time.
        self.offset + now.saturating_mul(self.rate_ppm) / 1_000_000
    }

    /// Everything but the clock is lost (a crash or a restart).
    pub fn reset(&mut self) {
        *self = StrictNode {
            epoch: self.epoch + 1,
            ..StrictNode::with_clock(self.rate_ppm, self.offset)
        };
    }

    /// The lease is held and the floor raised: it may take ids (the deadline is checked after).
    pub fn holds_term(&self) -> bool {
        self.lease.is_some() && self.ready
    }

    /// A term starts (or is extended) by a call sent at `sent_local` that succeeded.
    pub fn extend(&mut self, sent_local: u64) {
        let ttl = u64::try_from(TTL.as_nanos()).unwrap_or(u64::MAX);
        self.renewed_sent = self.renewed_sent.max(sent_local);
        self.deadline = self.deadline.max(sent_local + ttl - SAFETY_MARGIN);
    }

    /// The lease is lost: no term until the next acquisition.
    pub fn lose_lease(&mut self) {
        self.lease = None;
        self.ready = false;
        self.deadline = 0;
        self.renewing = None;
        self.reading = None;
        self.hint = None;
    }
}

/// The strict namespace's authority: its watermark and the leader lease, expiring by the
/// authority's clock.
#[derive(Debug)]
pub struct StrictAuthority {
    /// The real in-memory authority.
    pub auth: MemoryAuthority,
}

impl StrictAuthority {
    /// A fresh one on `clock`.
    pub fn new(clock: &SimClock) -> Self {
        let auth = MemoryAuthority::with_clock(Arc::new(clock.clone()));
        let spec = SequenceSpec::new(Width::Bits64, 1, 1, 0).expect("a valid spec");
        ready(auth.ensure_namespace(&ns(), spec)).expect("creates the namespace");
        StrictAuthority { auth }
    }

    /// The watermark.
    pub fn watermark(&self) -> u64 {
        ready(self.auth.state(&ns()))
            .ok()
            .flatten()
            .map_or(0, |s| s.watermark)
    }
}

/// The strict namespace of one run: its own random stream, its authority, every node's side of
/// it, and the history of its requests for the linearizability checker.
#[derive(Debug)]
pub struct Strict {
    /// Every random choice of the strict namespace (the world's own stream is untouched).
    pub rng: Rng,
    /// The authority.
    pub auth: StrictAuthority,
    /// Per node.
    pub nodes: Vec<StrictNode>,
    /// Every request that ended: answered (with its ids) or failed (without).
    pub ops: Vec<Op>,
    /// Clean stops the authority applied (at most once each).
    pub stopped: BTreeSet<u64>,
    next_req: u64,
}

impl Strict {
    /// The strict namespace for `seed`, with `nodes` nodes, on the authority's `clock`.
    pub fn new(seed: u64, nodes: usize, clock: &SimClock) -> Self {
        let mut rng = Rng::new(seed ^ 0x57a1_c70d_e4ed_0001);
        let nodes = (0..nodes).map(|_| StrictNode::new(&mut rng)).collect();
        Strict {
            rng,
            auth: StrictAuthority::new(clock),
            nodes,
            ops: Vec::new(),
            stopped: BTreeSet::new(),
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
    fn a_holder_names_its_node() {
        let r = lease_request(3, 1, 2);
        assert_eq!(node_of(&r.holder), Some(3));
        assert_eq!(node_of("operator"), None);
    }

    #[test]
    fn a_term_ends_short_of_the_ttl_after_the_send_and_only_grows() {
        let mut n = StrictNode::new(&mut Rng::new(1));
        n.extend(1_000 * MS);
        assert_eq!(n.deadline, 1_000 * MS + 100 * MS - SAFETY_MARGIN);
        // A reply to an older renewal does not shorten the term.
        n.extend(990 * MS);
        assert_eq!(n.deadline, 1_080 * MS);
        assert_eq!(n.renewed_sent, 1_000 * MS);
    }

    #[test]
    fn a_clock_within_the_spread_reaches_the_deadline_before_the_authority_expires() {
        // The slowest clock allowed: its term must end (in real time) before the TTL runs out.
        let slow = StrictNode::with_clock(1_000_000 - RATE_SPREAD_PPM, 0);
        let ttl = u64::try_from(TTL.as_nanos()).unwrap_or(u64::MAX);
        let real_end = (ttl - SAFETY_MARGIN) * 1_000_000 / slow.rate_ppm;
        assert!(real_end < ttl, "{real_end} >= {ttl}");
        assert!(slow.local(real_end + MS) >= ttl - SAFETY_MARGIN);
    }
}
