//! The world: the store, four nodes (two upper, two lower), the network between them, the
//! operator, and the one seeded scheduler that decides every step.
//!
//! A run is a fixed number of steps. Each step moves simulated time forward by a random
//! amount, delivers every message now due (in due-time order, ties by send order), then takes
//! one action chosen by the run's generator: a client request, a completion, a refill check,
//! a lease, a give-back, a renewal, a snowflake batch, or a fault; the strict and the shard-owned
//! namespaces then take one each, from random streams of their own. Everything random comes from
//! the seed, no decision reads the host's clock (the in-memory authority stamps its audit
//! entries with it, which nothing reads back), and every collection iterates in a fixed
//! order, so a seed replays bit for bit; the trace hash folds every step, message and id.

mod backend;
mod sequence;
mod shards;
mod strict;
mod worker;

use crate::bugs::*;
use crate::checker::{class_of, Checker};
use crate::clock::{ready, Now, SimClock};
use crate::node::{layout, Direct, Node, Request};
use crate::rng::Rng;
use crate::shards::{ShardMsg, Shards};
use crate::store::{group, Answer, Store};
use crate::strict::{Strict, StrictMsg};
use idmint_core::buffer::Taken;
use idmint_core::{Block, SnowflakeGenerator};
use idmint_store::lease::{LeaseError, LeaseRequest, WorkerChoice, WorkerLeases};
use idmint_store::WorkerLease;
use std::collections::BTreeMap;
use std::time::Duration;

const MS: u64 = 1_000_000;
/// The store's address; nodes are 0..NODES.
const STORE: usize = usize::MAX;
const NODES: usize = 4;
const TTL: Duration = Duration::from_millis(200);
const SAFETY_MARGIN_MS: u64 = 40;
const FLOOR_AHEAD_MS: u64 = 60;
const RENEW_EVERY: u64 = 25 * MS;
const TIMEOUT: u64 = 30 * MS;

#[derive(Debug, Clone)]
enum Msg {
    Reserve {
        req: u64,
        member: usize,
        count: u64,
    },
    /// Store-internal: the write half of a reservation, after the storage delay.
    Commit {
        req: u64,
        member: usize,
        count: u64,
        read: u64,
        from: usize,
    },
    Granted {
        req: u64,
        member: usize,
        block: Block,
        incarnation: u64,
        repaired: bool,
        era: u64,
    },
    GiveBack {
        req: u64,
        member: usize,
        tail: Block,
        incarnation: u64,
    },
    LeaseReq {
        req: u64,
        count: u64,
        min_start: u64,
    },
    LeaseReply {
        req: u64,
        block: Block,
        token: u64,
        era: u64,
    },
    TakeBack {
        token: u64,
        tail: Block,
    },
    RaiseFloor {
        to: u64,
    },
    Acquire {
        req: u64,
        request: LeaseRequest,
    },
    Acquired {
        req: u64,
        lease: WorkerLease,
    },
    Renew {
        req: u64,
        lease: WorkerLease,
        floor_ms: u64,
    },
    Renewed {
        req: u64,
        lease: WorkerLease,
    },
    Superseded {
        req: u64,
    },
    /// The strict namespace's messages.
    Strict(StrictMsg),
    /// The shard namespace's messages.
    Shard(ShardMsg),
}

impl Msg {
    fn code(&self) -> u64 {
        match self {
            Msg::Reserve { .. } => 1,
            Msg::Commit { .. } => 2,
            Msg::Granted { .. } => 3,
            Msg::GiveBack { .. } => 4,
            Msg::LeaseReq { .. } => 5,
            Msg::LeaseReply { .. } => 6,
            Msg::TakeBack { .. } => 7,
            Msg::RaiseFloor { .. } => 8,
            Msg::Acquire { .. } => 9,
            Msg::Acquired { .. } => 10,
            Msg::Renew { .. } => 11,
            Msg::Renewed { .. } => 12,
            Msg::Superseded { .. } => 13,
            Msg::Strict(m) => 100 + m.code(),
            Msg::Shard(m) => 200 + m.code(),
        }
    }
}

/// A message in flight: from, to, what.
type Envelope = (usize, usize, Msg);

/// The random stream a message's faults are drawn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    World,
    Strict,
    Shards,
}

/// How one run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// The first violation, if any.
    pub violation: Option<String>,
    /// The step it was found at.
    pub step: u64,
    /// FNV-1a of everything that happened.
    pub trace: u64,
    /// Sequence ids served and snowflake ids issued (the strict and shard namespaces'
    /// included).
    pub ids: u64,
    /// Ids of the strict namespace's history that passed its linearizability check (0 when
    /// the run stopped at a violation).
    pub strict_ids: u64,
    /// Ids the shard namespace's holders issued.
    pub shard_ids: u64,
    /// Answers of the shard namespace that came back through a forward to the range's holder.
    pub shard_forwarded: u64,
}

/// The world of one run.
pub struct World {
    rng: Rng,
    bugs: Bugs,
    now: Now,
    store: Store,
    nodes: Vec<Node>,
    /// In flight: (due, send order) -> (from, to, message).
    /// Boxed: the tree moves its entries as it grows and shrinks.
    queue: BTreeMap<(u64, u64), Box<Envelope>>,
    sent: u64,
    next_req: u64,
    /// Isolated nodes, until the time given.
    partitioned: BTreeMap<usize, u64>,
    era: u64,
    /// Takes from any buffer so far (the take order).
    takes: u64,
    /// Give-back requests the store applied (at most once each).
    given_back: std::collections::BTreeSet<u64>,
    checker: Checker,
    /// The strict namespace, on its own random stream.
    strict: Strict,
    /// The shard-owned snowflake namespace, on its own random stream.
    shards: Shards,
    trace: u64,
    /// `SIM_DEBUG` set: every message and action on stderr.
    debug: bool,
}

impl World {
    /// A world for `seed` with `bugs` planted.
    pub fn new(seed: u64, bugs: Bugs) -> Self {
        bugs.install();
        let mut rng = Rng::new(seed);
        let now = Now::default();
        let store_clock = SimClock::new(now.clone(), 0);
        let store = Store::new(store_clock.clone());
        let shards = Shards::new(seed, NODES, &now, &store_clock);
        let nodes = (0..NODES)
            .map(|i| {
                let skew = rng.range(0, 60 * MS) as i64 - (30 * MS) as i64;
                Node::new(i, i < 2, SimClock::new(now.clone(), skew))
            })
            .collect();
        World {
            rng,
            bugs,
            now,
            store,
            nodes,
            queue: BTreeMap::new(),
            sent: 0,
            next_req: 1,
            partitioned: BTreeMap::new(),
            era: 0,
            takes: 0,
            given_back: std::collections::BTreeSet::new(),
            checker: Checker::default(),
            strict: Strict::new(seed, NODES, &store_clock),
            shards,
            trace: 0xcbf2_9ce4_8422_2325,
            debug: std::env::var_os("SIM_DEBUG").is_some(),
        }
    }

    fn fold(&mut self, x: u64) {
        for b in x.to_le_bytes() {
            self.trace ^= u64::from(b);
            self.trace = self.trace.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn req(&mut self) -> u64 {
        self.next_req += 1;
        self.next_req
    }

    fn cut_off(&self, a: usize) -> bool {
        a != STORE
            && self
                .partitioned
                .get(&a)
                .is_some_and(|&until| until > self.now.get())
    }

    /// Sends with the network's faults: loss, duplication, delay (hence reordering), partitions.
    fn send(&mut self, from: usize, to: usize, msg: Msg) {
        self.post(Stream::World, from, to, msg, 0);
    }

    /// [`World::send`] with the faults drawn from `stream`, each copy delayed by `extra` more.
    fn post(&mut self, stream: Stream, from: usize, to: usize, msg: Msg, extra: u64) {
        let cut = self.cut_off(from) || self.cut_off(to);
        let rng = match stream {
            Stream::World => &mut self.rng,
            Stream::Strict => &mut self.strict.rng,
            Stream::Shards => &mut self.shards.rng,
        };
        if cut || rng.chance(40) {
            self.fold(0xdead);
            return;
        }
        let copies = if rng.chance(30) { 2 } else { 1 };
        for _ in 0..copies {
            let delay = if rng.chance(50) {
                rng.range(10 * MS, 80 * MS)
            } else {
                rng.range(MS / 10, 3 * MS)
            };
            self.sent += 1;
            self.queue.insert(
                (self.now.get() + delay + extra, self.sent),
                Box::new((from, to, msg.clone())),
            );
        }
    }

    /// Delivers within the store itself after `delay` (slow storage); never lost.
    fn later(&mut self, delay: u64, msg: Msg) {
        self.sent += 1;
        self.queue.insert(
            (self.now.get() + delay, self.sent),
            Box::new((STORE, STORE, msg)),
        );
    }

    /// Runs `steps` steps; stops at the first violation.
    pub fn run(mut self, seed: u64, steps: u64) -> Outcome {
        let mut step = 0;
        while step < steps && self.checker.violation.is_none() {
            step += 1;
            let dt = self.rng.range(MS / 10, 4 * MS);
            self.now.advance(dt);
            self.fold(step);
            while let Some(entry) = self.queue.first_entry() {
                if entry.key().0 > self.now.get() {
                    break;
                }
                let (from, to, msg) = *entry.remove();
                if self.debug {
                    eprintln!("{step} t={} {from}->{to} {msg:?}", self.now.get() / 1000);
                }
                self.fold(msg.code());
                self.deliver(from, to, msg);
            }
            self.act();
            self.strict_act();
            self.shards_act();
            self.check_accounts();
        }
        let strict_ids = if self.checker.violation.is_none() {
            self.strict_verdict()
        } else {
            0
        };
        Outcome {
            seed,
            violation: self.checker.violation.take(),
            step,
            trace: self.trace,
            ids: self.checker.served_count
                + self.checker.snowflake_count
                + self.checker.shard_count,
            strict_ids,
            shard_ids: self.checker.shard_count,
            shard_forwarded: self.shards.forwarded_answers,
        }
    }

    fn check_accounts(&mut self) {
        for n in &self.nodes {
            if n.up {
                self.checker
                    .accounted(n.id, false, n.buffer.stats(), n.buffer.buffered());
                let b = &self.strict.nodes[n.id].buffer;
                self.checker.accounted(n.id, true, b.stats(), b.buffered());
            }
        }
    }

    fn act(&mut self) {
        let i = self.rng.below(NODES as u64) as usize;
        let roll = self.rng.below(1000);
        self.fold(roll);
        if self.debug {
            eprintln!("act node {i} roll {roll} up {}", self.nodes[i].up);
        }
        if !self.nodes[i].up {
            if roll < 150 {
                self.restart(i);
            }
            return;
        }
        match roll {
            0..=249 => self.client_take(i),
            250..=399 => self.complete(i),
            400..=499 => self.refill(i),
            500..=539 => self.give_back(i),
            540..=679 => self.worker_tick(i),
            680..=819 => self.snowflakes(i),
            820..=829 => self.crash(i),
            830..=839 => {
                let until = self.now.get() + self.rng.range(50 * MS, 400 * MS);
                self.partitioned.insert(i, until);
            }
            840..=859 => {
                let by = self.rng.range(0, 300 * MS) as i64 - (150 * MS) as i64;
                self.nodes[i].clock.step(by);
            }
            860..=869 => self.rebase(),
            870..=889 => {
                let m = i % 2;
                let w = self.store.members[m].watermark();
                self.store.members[m].snapshot = w;
            }
            890..=894 => self.restore(i % 2),
            895..=899 => self.store.wipe(i % 2),
            900..=929 => self.store.repair(i % 2),
            930..=934 => {
                let request = lease_request(i, 0);
                self.store.wipe_leases(&request);
            }
            935..=959 => self.graceful_stop(i),
            _ => self.direct(i),
        }
    }

    // ---- delivery -----------------------------------------------------------------------

    fn deliver(&mut self, from: usize, to: usize, msg: Msg) {
        if to == STORE {
            self.at_store(from, msg);
            return;
        }
        if !self.nodes[to].up {
            return;
        }
        match msg {
            Msg::Granted {
                req,
                member,
                block,
                incarnation,
                repaired,
                era,
            } => self.granted(to, req, member, block, incarnation, repaired, era),
            Msg::LeaseReq {
                req,
                count,
                min_start,
            } => self.lease_req(to, from, req, count, min_start),
            Msg::LeaseReply {
                req,
                block,
                token,
                era,
            } => {
                let n = &mut self.nodes[to];
                if n.lease_in.map(|l| l.0) != Some(req)
                    || (era != n.record.era && !self.bugs.on(RESTORE_KEEPS_CACHE))
                {
                    return;
                }
                n.lease_in = None;
                if n.admit(block) && token != 0 {
                    n.tail_token = Some((from, token));
                }
            }
            Msg::TakeBack { token, tail } => {
                let n = &mut self.nodes[to];
                if let Some((t, taken)) = n.lease_out.as_ref() {
                    if *t == token && n.buffer.take_back_tail(taken, tail).is_some() {
                        n.lease_out = None;
                    }
                }
            }
            Msg::RaiseFloor { to: floor } => {
                let n = &mut self.nodes[to];
                n.buffer.raise_floor(floor);
                // As `Supply::advanced`: the outstanding lease ends, its tail cannot come back.
                // The planted tail-below-floor removes this guard too (either alone suffices).
                if !self.bugs.on(TAIL_BELOW_FLOOR) {
                    n.lease_out = None;
                }
                if !self.bugs.on(REBASE_NOT_RECORDED) {
                    n.record.floor = n.record.floor.max(floor);
                }
                self.checker.floor_applied(to, floor);
            }
            Msg::Acquired { req, lease } => self.acquired(to, req, lease),
            Msg::Renewed { req, lease } => self.renewed(to, req, lease),
            Msg::Superseded { req } => self.superseded(to, req),
            Msg::Strict(m) => self.strict_at_node(from, to, m),
            Msg::Shard(m) => self.shard_at_node(from, to, m),
            _ => {}
        }
    }
}

/// Node `i`'s lease request in its `epoch`th run.
fn lease_request(i: usize, epoch: u64) -> LeaseRequest {
    LeaseRequest {
        group: group(),
        workers: 2,
        choice: WorkerChoice::LowestFree,
        prefer_floor_at_most: None,
        holder: format!("node-{i} run {epoch}"),
        layout: "twitter".into(),
        ttl: TTL,
    }
}

/// The layout timestamp of `ms` (Unix milliseconds).
fn ts_of_ms(ms: u64) -> u64 {
    let l = layout();
    ms.saturating_mul(MS).saturating_sub(l.epoch_nanos()) / l.unit_nanos()
}

/// Runs one seed for `steps` steps with `bugs`.
pub fn run(seed: u64, bugs: Bugs, steps: u64) -> Outcome {
    World::new(seed, bugs).run(seed, steps)
}
