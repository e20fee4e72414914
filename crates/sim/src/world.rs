//! The world: the store, four nodes (two upper, two lower), the network between them, the
//! operator, and the one seeded scheduler that decides every step.
//!
//! A run is a fixed number of steps. Each step moves simulated time forward by a random
//! amount, delivers every message now due (in due-time order, ties by send order), then takes
//! one action chosen by the run's generator: a client request, a completion, a refill check,
//! a lease, a give-back, a renewal, a snowflake batch, or a fault. Everything random comes from
//! the seed, nothing reads the host's clock, and every collection iterates in a fixed order, so
//! a seed replays bit for bit; the trace hash folds every step, message and id.

use crate::bugs::*;
use crate::checker::{class_of, Checker};
use crate::clock::{ready, Now, SimClock};
use crate::node::{layout, Direct, Node, Request};
use crate::rng::Rng;
use crate::store::{group, Answer, Store};
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
        }
    }
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
    /// Sequence ids served and snowflake ids issued.
    pub ids: u64,
}

/// The world of one run.
pub struct World {
    rng: Rng,
    bugs: Bugs,
    now: Now,
    store: Store,
    nodes: Vec<Node>,
    /// In flight: (due, send order) -> (from, to, message).
    queue: BTreeMap<(u64, u64), (usize, usize, Msg)>,
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
        let store = Store::new(SimClock::new(now.clone(), 0));
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
        if self.cut_off(from) || self.cut_off(to) || self.rng.chance(40) {
            self.fold(0xdead);
            return;
        }
        let copies = if self.rng.chance(30) { 2 } else { 1 };
        for _ in 0..copies {
            let delay = if self.rng.chance(50) {
                self.rng.range(10 * MS, 80 * MS)
            } else {
                self.rng.range(MS / 10, 3 * MS)
            };
            self.sent += 1;
            self.queue
                .insert((self.now.get() + delay, self.sent), (from, to, msg.clone()));
        }
    }

    /// Delivers within the store itself after `delay` (slow storage); never lost.
    fn later(&mut self, delay: u64, msg: Msg) {
        self.sent += 1;
        self.queue
            .insert((self.now.get() + delay, self.sent), (STORE, STORE, msg));
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
                let (from, to, msg) = entry.remove();
                if self.debug {
                    eprintln!("{step} t={} {from}->{to} {msg:?}", self.now.get() / 1000);
                }
                self.fold(msg.code());
                self.deliver(from, to, msg);
            }
            self.act();
            self.check_accounts();
        }
        Outcome {
            seed,
            violation: self.checker.violation.take(),
            step,
            trace: self.trace,
            ids: self.checker.served_count + self.checker.snowflake_count,
        }
    }

    fn check_accounts(&mut self) {
        for n in &self.nodes {
            if n.up {
                self.checker
                    .accounted(n.id, n.buffer.stats(), n.buffer.buffered());
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

    // ---- sequence ids -------------------------------------------------------------------

    fn client_take(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        if n.poisoned {
            return;
        }
        if n.buffer.buffered() == 0 {
            self.refill(i);
            return;
        }
        let count = self.rng.range(1, 6);
        let n = &mut self.nodes[i];
        let mut taken = Taken::new();
        n.buffer.take_for(&mut taken, count);
        let floor = self.checker.floor_of(i);
        for id in taken.ids() {
            self.fold(id);
        }
        self.takes += 1;
        let seq = self.takes;
        self.nodes[i].requests.push(Request { taken, floor, seq });
    }

    fn complete(&mut self, i: usize) {
        if self.nodes[i].requests.is_empty() {
            return;
        }
        let k = self.rng.below(self.nodes[i].requests.len() as u64) as usize;
        let fail = self.rng.chance(200);
        let r = self.nodes[i].requests.remove(k);
        if fail {
            let _ = self.nodes[i].buffer.put_back(r.taken);
            self.fold(1);
        } else {
            let ids: Vec<u64> = r.taken.ids().collect();
            self.checker.taken(i, r.seq, &ids, r.floor);
            self.checker.served(i, &ids);
        }
    }

    fn refill(&mut self, i: usize) {
        let now = self.now.get();
        if self.nodes[i].poisoned {
            return;
        }
        if self.nodes[i].upper {
            if let Some((req, member, count, at, tries)) = self.nodes[i].refill {
                if now - at > TIMEOUT {
                    // Commit unknown: the block may have been granted; it is never asked for
                    // again (invariant 1), and a late reply is ignored.
                    if tries >= 1 || !self.bugs.on(RETRY_TWICE) {
                        self.nodes[i].refill = None;
                        self.nodes[i].buffer.refill_failed();
                    } else {
                        self.nodes[i].refill = Some((req, member, count, now, tries + 1));
                        self.send(i, STORE, Msg::Reserve { req, member, count });
                    }
                }
                return;
            }
            let Some(count) = self.nodes[i].buffer.force_refill(now) else {
                return;
            };
            let member = self.pick_member(i);
            let req = self.req();
            self.nodes[i].refill = Some((req, member, count, now, 0));
            self.send(i, STORE, Msg::Reserve { req, member, count });
        } else {
            if let Some((_, _, at)) = self.nodes[i].lease_in {
                if now - at > TIMEOUT {
                    self.nodes[i].lease_in = None;
                    self.nodes[i].buffer.refill_failed();
                }
                return;
            }
            let Some(count) = self.nodes[i].buffer.start_refill(now) else {
                return;
            };
            let upper = if self.rng.chance(700) {
                i % 2
            } else {
                1 - i % 2
            };
            let req = self.req();
            let min_start = self.nodes[i].record.upstream;
            self.nodes[i].lease_in = Some((req, upper, now));
            self.send(
                i,
                upper,
                Msg::LeaseReq {
                    req,
                    count,
                    min_start,
                },
            );
        }
    }

    fn pick_member(&mut self, i: usize) -> usize {
        let n = &mut self.nodes[i];
        let m = n.next_member;
        n.next_member = 1 - m;
        if n.member_bad[m] {
            1 - m
        } else {
            m
        }
    }

    /// A cache-off request: its ids reserved from the store for it alone.
    fn direct(&mut self, i: usize) {
        if !self.nodes[i].upper || self.nodes[i].poisoned {
            return;
        }
        let now = self.now.get();
        // A request whose reply is overdue fails (commit unknown: its block, if granted, is
        // never served); the planted bug retries it with the same request id instead.
        let overdue = self.nodes[i]
            .direct
            .iter()
            .find(|(_, d)| now - d.at > TIMEOUT)
            .map(|(k, d)| (*k, *d));
        if let Some((req, d)) = overdue {
            if d.tries >= 3 || !self.bugs.on(RETRY_TWICE) {
                self.nodes[i].direct.remove(&req);
            } else {
                self.nodes[i].direct.insert(
                    req,
                    Direct {
                        at: now,
                        tries: d.tries + 1,
                        ..d
                    },
                );
                let (member, count) = (d.member, d.count);
                self.send(i, STORE, Msg::Reserve { req, member, count });
            }
            return;
        }
        let count = self.rng.range(1, 4);
        self.reserve_direct(i, count, None);
    }

    fn reserve_direct(&mut self, i: usize, count: u64, lease_for: Option<(usize, u64)>) {
        let member = self.pick_member(i);
        let req = self.req();
        let at = self.now.get();
        let d = Direct {
            member,
            count,
            at,
            tries: 0,
            lease_for,
        };
        self.nodes[i].direct.insert(req, d);
        self.send(i, STORE, Msg::Reserve { req, member, count });
    }

    fn give_back(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        if n.upper || n.poisoned {
            return;
        }
        let Some((upper, token)) = n.tail_token.take() else {
            return;
        };
        let Some(tail) = n.buffer.take_unused_tail() else {
            return;
        };
        n.buffer.record_given_back(tail.len());
        self.send(i, upper, Msg::TakeBack { token, tail });
    }

    /// A graceful stop of an upper node: its unused tail back to the store by
    /// compare-and-swap, then a restart.
    fn graceful_stop(&mut self, i: usize) {
        if !self.nodes[i].upper || self.nodes[i].poisoned {
            return;
        }
        // Draining: the requests in flight answer first.
        while !self.nodes[i].requests.is_empty() {
            let r = self.nodes[i].requests.remove(0);
            let ids: Vec<u64> = r.taken.ids().collect();
            self.checker.taken(i, r.seq, &ids, r.floor);
            self.checker.served(i, &ids);
        }
        if let Some(tail) = self.nodes[i].buffer.take_unused_tail() {
            self.nodes[i].buffer.record_given_back(tail.len());
            let member = class_of(tail.start());
            let incarnation = self.nodes[i].record.incarnations[member];
            let req = self.req();
            let msg = Msg::GiveBack {
                req,
                member,
                tail,
                incarnation,
            };
            if self.bugs.on(GIVEBACK_RETRIED) {
                // Retried as if its reply had been lost.
                self.send(i, STORE, msg.clone());
            }
            self.send(i, STORE, msg);
        }
        self.release_worker(i);
        self.nodes[i].up = false;
        self.restart(i);
    }

    fn crash(&mut self, i: usize) {
        self.nodes[i].up = false;
        self.fold(0xc0);
    }

    fn restart(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.up = true;
        n.epoch += 1;
        n.reset();
        if n.record.era != self.era {
            n.record.era = self.era;
        }
    }

    fn rebase(&mut self) {
        let high = self
            .store
            .members
            .iter()
            .map(|m| m.watermark())
            .max()
            .unwrap_or(0);
        let to = high + self.rng.range(1, 40);
        self.store.rebase(to);
        for i in 0..NODES {
            self.send(STORE, i, Msg::RaiseFloor { to });
        }
    }

    fn restore(&mut self, m: usize) {
        let watermark = self.store.restore(m);
        self.era += 1;
        self.checker.rollback(m, watermark);
        let keep = self.bugs.on(RESTORE_KEEPS_CACHE);
        for n in &mut self.nodes {
            // The operator's procedure: every node drops what it holds from before.
            n.record.era = self.era;
            n.record.incarnations[m] = self.store.members[m].incarnation;
            if n.up {
                if keep {
                    n.gate = crate::block_gate::BlockGate::new(crate::block_gate::IdSpace::new(
                        crate::store::spec(0),
                        vec![0, 1],
                    ));
                } else {
                    n.reset();
                }
            }
        }
    }

    // ---- snowflake ids ------------------------------------------------------------------

    fn worker_tick(&mut self, i: usize) {
        let now = self.now.get();
        let w = &self.nodes[i].worker;
        if let Some((_, at)) = w.acquiring {
            if now - at > TIMEOUT {
                self.nodes[i].worker.acquiring = None;
            }
            return;
        }
        if w.lease.is_none() {
            let req = self.req();
            let request = lease_request(i, self.nodes[i].epoch);
            self.nodes[i].worker.acquiring = Some((req, now));
            self.send(i, STORE, Msg::Acquire { req, request });
            return;
        }
        if let Some((_, sent, _, _)) = w.renewing {
            if now - sent > TIMEOUT {
                self.nodes[i].worker.renewing = None;
            }
            return;
        }
        if now - w.renewed_at < RENEW_EVERY {
            return;
        }
        let (Some(lease), Some(g)) = (w.lease.clone(), w.generator.as_ref()) else {
            return;
        };
        let gen_now = g.now_unix_nanos();
        let floor_ms = gen_now / MS + FLOOR_AHEAD_MS;
        if self.bugs.on(FLOOR_NOT_DURABLE) {
            g.set_limit(ts_of_ms(floor_ms));
        }
        let req = self.req();
        self.nodes[i].worker.renewing = Some((req, now, gen_now, floor_ms));
        self.send(
            i,
            STORE,
            Msg::Renew {
                req,
                lease,
                floor_ms,
            },
        );
    }

    fn snowflakes(&mut self, i: usize) {
        let w = &self.nodes[i].worker;
        let Some(g) = w.generator.as_ref() else {
            return;
        };
        let mut out = Vec::new();
        let count = self.rng.range(1, 4);
        if g.next_ids(count, &mut out).is_ok() {
            let generation = w.generation;
            for &id in &out {
                self.fold(id);
            }
            self.checker.snowflakes(i, generation, &out);
        }
    }

    fn release_worker(&mut self, i: usize) {
        let w = &mut self.nodes[i].worker;
        if let (Some(lease), Some(g)) = (w.lease.take(), w.generator.take()) {
            g.set_limit(0);
            let floor_ms = g
                .last_timestamp()
                .map_or(0, |ts| layout().unix_nanos_of(ts + 1) / MS + 1);
            let _ = ready(self.store.leases.release(&lease, floor_ms));
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
            Msg::Renewed { req, lease } => {
                let w = &mut self.nodes[to].worker;
                let Some((r, sent, gen_at, floor_ms)) = w.renewing else {
                    return;
                };
                if r != req || w.lease.as_ref().map(|l| l.token) != Some(lease.token) {
                    return;
                }
                w.renewing = None;
                w.renewed_at = sent;
                if let Some(g) = w.generator.as_ref() {
                    let ttl = u64::try_from(TTL.as_nanos()).unwrap_or(u64::MAX);
                    let deadline = gen_at + ttl - SAFETY_MARGIN_MS * MS;
                    let limit = ts_of_ms(floor_ms).min(ts_of_ms(deadline / MS));
                    g.set_limit(limit.max(g.limit().min(limit)));
                }
            }
            Msg::Superseded { req } => {
                let w = &mut self.nodes[to].worker;
                if w.renewing.map(|r| r.0) != Some(req) {
                    return;
                }
                w.renewing = None;
                if let Some(g) = w.generator.take() {
                    g.set_limit(0);
                    w.last_ts = w.last_ts.max(g.last_timestamp());
                }
                w.lease = None;
            }
            _ => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn granted(
        &mut self,
        i: usize,
        req: u64,
        member: usize,
        block: Block,
        incarnation: u64,
        repaired: bool,
        era: u64,
    ) {
        let bugs = self.bugs;
        let n = &mut self.nodes[i];
        if era != n.record.era && !bugs.on(RESTORE_KEEPS_CACHE) {
            return;
        }
        let known = n.record.incarnations[member];
        if incarnation != known || !repaired {
            if repaired || bugs.on(STALE_MEMBER) {
                n.record.incarnations[member] = incarnation;
                n.member_bad[member] = false;
            } else {
                // A re-created member not yet repaired: nothing from it until it is.
                n.member_bad[member] = true;
                if n.refill.map(|r| r.0) == Some(req) {
                    n.refill = None;
                    n.buffer.refill_failed();
                }
                n.direct.remove(&req);
                return;
            }
        } else if repaired {
            n.member_bad[member] = false;
        }
        if let Some(d) = n.direct.get(&req).copied() {
            if !bugs.on(RETRY_TWICE) {
                n.direct.remove(&req);
            }
            if n.poisoned || n.gate.admit_concurrent(&block).is_err() {
                return;
            }
            if let Some((lower, lease_req)) = d.lease_for {
                let era = n.record.era;
                let reply = Msg::LeaseReply {
                    req: lease_req,
                    block,
                    token: 0,
                    era,
                };
                self.send(i, lower, reply);
                return;
            }
            if block.start() < n.buffer.floor() {
                return;
            }
            let ids: Vec<u64> = block.ids().collect();
            self.checker.served(i, &ids);
            return;
        }
        if n.refill.map(|r| r.0) == Some(req) {
            n.refill = None;
            n.admit(block);
        }
    }

    fn lease_req(&mut self, i: usize, from: usize, req: u64, count: u64, min_start: u64) {
        let n = &mut self.nodes[i];
        if !n.upper || n.poisoned {
            return;
        }
        if n.buffer.lowest().is_some_and(|l| l < min_start)
            || (min_start > 0 && n.buffer.buffered() == 0)
        {
            // The lower node held ids above this buffer's: a block straight from the store,
            // above everything granted, carrying no lease.
            self.reserve_direct(i, count, Some((from, req)));
            return;
        }
        let mut taken = Taken::new();
        let Some(block) = n.buffer.take_block_for(&mut taken, count) else {
            self.refill(i);
            return;
        };
        let token = req.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        n.lease_out = Some((token, taken));
        let era = n.record.era;
        self.send(
            i,
            from,
            Msg::LeaseReply {
                req,
                block,
                token,
                era,
            },
        );
    }

    fn acquired(&mut self, i: usize, req: u64, lease: WorkerLease) {
        let bugs = self.bugs;
        let n = &mut self.nodes[i];
        let w = &mut n.worker;
        if w.acquiring.map(|a| a.0) != Some(req) {
            return;
        }
        w.acquiring = None;
        let floor_ts =
            (lease.floor_unix_ms > 0).then(|| ts_of_ms(lease.floor_unix_ms).saturating_sub(1));
        let resume = if bugs.on(CLOCK_BACK_RESTART) && w.fresh {
            w.last_ts
        } else {
            floor_ts.max(w.last_ts)
        };
        let Ok(g) = SnowflakeGenerator::new(layout(), lease.worker, n.clock.clone(), resume) else {
            return;
        };
        g.set_limit(0);
        w.generation += 1;
        w.fresh = false;
        w.generator = Some(g);
        w.lease = Some(lease);
        w.renewed_at = 0;
    }

    fn at_store(&mut self, from: usize, msg: Msg) {
        match msg {
            Msg::Reserve { req, member, count } => {
                let read = self.store.read(member);
                let delay = if self.rng.chance(200) {
                    self.rng.range(5 * MS, 40 * MS)
                } else {
                    self.rng.range(0, MS)
                };
                self.later(
                    delay,
                    Msg::Commit {
                        req,
                        member,
                        count,
                        read,
                        from,
                    },
                );
            }
            Msg::Commit {
                req,
                member,
                count,
                read,
                from,
            } => match self.store.commit(self.bugs, member, req, read, count) {
                Answer::Granted(block, repaired) => {
                    self.fold(block.start());
                    self.checker.grant(member, block.start(), block.end());
                    let m = &self.store.members[member];
                    let reply = Msg::Granted {
                        req,
                        member,
                        block,
                        incarnation: m.incarnation,
                        repaired,
                        era: self.era,
                    };
                    self.send(STORE, from, reply);
                }
                Answer::Conflict(now) => {
                    let delay = self.rng.range(0, 2 * MS);
                    self.later(
                        delay,
                        Msg::Commit {
                            req,
                            member,
                            count,
                            read: now,
                            from,
                        },
                    );
                }
                Answer::Failed => {}
            },
            Msg::GiveBack {
                req,
                member,
                tail,
                incarnation,
            } => {
                // Once per request, and fenced by incarnation: the watermark alone can come
                // back to the tail's end (a later grant, a restore), so a second delivery of
                // the same give-back would pass the compare-and-swap again (ABA).
                let ok = (self.given_back.insert(req) || self.bugs.on(GIVEBACK_RETRIED))
                    && incarnation == self.store.members[member].incarnation
                    && self.store.give_back(member, tail);
                self.fold(u64::from(ok));
            }
            Msg::Acquire { req, request } => {
                if let Ok(lease) = ready(self.store.leases.acquire(&request)) {
                    self.send(STORE, from, Msg::Acquired { req, lease });
                }
            }
            Msg::Renew {
                req,
                lease,
                floor_ms,
            } => match ready(self.store.leases.renew(&lease, floor_ms)) {
                Ok(lease) => self.send(STORE, from, Msg::Renewed { req, lease }),
                Err(LeaseError::Superseded { .. }) => {
                    self.send(STORE, from, Msg::Superseded { req })
                }
                Err(_) => {}
            },
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
