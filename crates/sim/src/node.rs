//! One simulated node: its sequence supply (the real `Buffer` and `BlockGate`), its durable
//! node record, and its snowflake worker lease with the real `SnowflakeGenerator`.
//!
//! The node's request handling is modelled on `idmint_node`'s `Supply` and `LeasedWorker`
//! (which are async and tokio-bound): every decision about ids is the real core's.

use crate::block_gate::{BlockGate, IdSpace};
use crate::clock::SimClock;
use crate::store::spec;
use idmint_core::buffer::Taken;
use idmint_core::{Block, Buffer, BufferConfig, BufferPolicy, Layout, Sizing, SnowflakeGenerator};
use idmint_store::WorkerLease;
use std::collections::BTreeMap;
use std::time::Duration;

/// What a node keeps across a crash (its node record).
#[derive(Debug, Clone, Default)]
pub struct Record {
    /// The rebase floor.
    pub floor: u64,
    /// Each member's incarnation the node last accepted.
    pub incarnations: [u64; 2],
    /// The store restores the node has seen.
    pub era: u64,
    /// A lower node: above every id it ever received (the lease's `min_start`).
    pub upstream: u64,
}

/// A client request holding ids taken from the buffer until it answers.
#[derive(Debug)]
pub struct Request {
    /// What it took.
    pub taken: Taken,
    /// The floor the node had applied when it took them.
    pub floor: u64,
    /// Its place in the node's take order.
    pub seq: u64,
}

/// A reservation straight from the store for one request (cache off, or a lease whose
/// `min_start` is above the buffer).
#[derive(Debug, Clone, Copy)]
pub struct Direct {
    /// The member asked.
    pub member: usize,
    /// Ids asked for.
    pub count: u64,
    /// Sent (or last retried) at.
    pub at: u64,
    /// Retries so far.
    pub tries: u32,
    /// For a lower node's lease: the node and its request id.
    pub lease_for: Option<(usize, u64)>,
}

/// The node's snowflake worker.
#[derive(Debug, Default)]
pub struct Worker {
    /// The lease held.
    pub lease: Option<WorkerLease>,
    /// The generator of the lease.
    pub generator: Option<SnowflakeGenerator<SimClock>>,
    /// Generators made so far (the writer's name in the checker).
    pub generation: u64,
    /// An acquisition in flight: its request id.
    pub acquiring: Option<(u64, u64)>,
    /// A renewal in flight: request id, monotonic send time, generator time at send, floor.
    pub renewing: Option<(u64, u64, u64, u64)>,
    /// Monotonic time of the latest renewal sent that succeeded.
    pub renewed_at: u64,
    /// The last timestamp issued by an earlier generator of this run.
    pub last_ts: Option<u64>,
    /// No generator made yet since the node (re)started.
    pub fresh: bool,
}

/// A simulated node.
#[derive(Debug)]
pub struct Node {
    /// Its index.
    pub id: usize,
    /// An upper node (reserves from the store) or a lower one (leases from an upper).
    pub upper: bool,
    /// Running.
    pub up: bool,
    /// Restarts so far.
    pub epoch: u64,
    /// Stopped serving after a refused block.
    pub poisoned: bool,
    /// The real buffer.
    pub buffer: Buffer,
    /// The real block gate.
    pub gate: BlockGate,
    /// The durable record.
    pub record: Record,
    /// A refill in flight: request id, member, count, sent at, attempts.
    pub refill: Option<(u64, usize, u64, u64, u32)>,
    /// The next member to reserve from.
    pub next_member: usize,
    /// Members whose new incarnation was refused until repaired.
    pub member_bad: [bool; 2],
    /// Client requests holding ids.
    pub requests: Vec<Request>,
    /// Cache-off requests waiting for the store, by request id.
    pub direct: BTreeMap<u64, Direct>,
    /// Upper: the newest block leased to a lower node, with its token.
    pub lease_out: Option<(u64, Taken)>,
    /// Lower: a lease request in flight (request id, upper, sent at).
    pub lease_in: Option<(u64, usize, u64)>,
    /// Lower: the token and upper of the newest lease received.
    pub tail_token: Option<(usize, u64)>,
    /// Its clock.
    pub clock: SimClock,
    /// Its snowflake worker.
    pub worker: Worker,
}

/// The buffer policy: small fixed blocks, so refills, leases and give-backs are frequent.
pub fn policy(upper: bool) -> BufferPolicy {
    BufferPolicy::new(BufferConfig {
        sizing: Sizing::Fixed(if upper { 24 } else { 8 }),
        low_water: 0.5,
        demand_window: Duration::from_secs(1),
    })
    .expect("a valid policy")
}

/// The snowflake layout: Twitter's (41 bits of milliseconds, 10 of worker, 12 of sequence).
pub fn layout() -> Layout {
    Layout::twitter()
}

impl Node {
    /// A node, started.
    pub fn new(id: usize, upper: bool, clock: SimClock) -> Self {
        let record = Record {
            incarnations: [1, 1],
            ..Record::default()
        };
        let mut node = Node {
            id,
            upper,
            up: true,
            epoch: 0,
            poisoned: false,
            buffer: Buffer::new(policy(upper)),
            gate: BlockGate::new(IdSpace::new(spec(0), vec![0, 1])),
            record,
            refill: None,
            next_member: id % 2,
            member_bad: [false; 2],
            requests: Vec::new(),
            direct: BTreeMap::new(),
            lease_out: None,
            lease_in: None,
            tail_token: None,
            clock,
            worker: Worker::default(),
        };
        node.worker.fresh = true;
        node
    }

    /// Drops everything that does not survive a crash.
    pub fn reset(&mut self) {
        self.buffer = Buffer::new(policy(self.upper));
        self.buffer.raise_floor(self.record.floor);
        self.gate = BlockGate::new(IdSpace::new(spec(0), vec![0, 1]));
        self.poisoned = false;
        self.refill = None;
        self.member_bad = [false; 2];
        self.requests.clear();
        self.direct.clear();
        self.lease_out = None;
        self.lease_in = None;
        self.tail_token = None;
        self.worker = Worker {
            generation: self.worker.generation,
            fresh: true,
            ..Worker::default()
        };
    }

    /// Passes a block through the real gate and into the real buffer; a refusal stops the
    /// node's sequence service (as the supply's poisoning does).
    pub fn admit(&mut self, block: Block) -> bool {
        if self.poisoned {
            return false;
        }
        let ok = self.gate.admit(&block).is_ok() && self.buffer.refill_done(block).is_ok();
        if ok {
            self.record.upstream = self.record.upstream.max(block.end());
        } else {
            self.poisoned = true;
        }
        ok
    }
}
