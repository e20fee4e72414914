//! The strict namespace in the world (crate::strict describes the node's design).
//!
//! Every step takes one strict action besides the world's own, drawn from the strict stream:
//! a client request at a node, a node's work (the leader serves, a follower forwards), its lease
//! upkeep (acquire, renew, read the watermark, refill), a pause of the leader (a stopped
//! process: its clock runs on, its messages wait), or a clean stop of the leader. The world's
//! crashes, restarts, graceful stops and partitions apply to it; renewals are sometimes delayed
//! past the TTL. Every request is recorded with its world start and end time, and the history
//! is checked for linearizability at the end of the run.

use super::*;
use crate::linearizable::{check, Op};
use crate::strict::{
    lease_request, node_of, ns, Batch, Caller, Queued, StrictMsg, FORWARD_TRIES, RENEW_EVERY,
    RETRY_EVERY, TIMEOUT as STRICT_TIMEOUT, WAIT_BOUND,
};
use idmint_store::Authority;

impl World {
    fn strict_send(&mut self, from: usize, to: usize, m: StrictMsg) {
        // A renewal is sometimes held up past the TTL (a slow network path, a stalled write).
        let extra = if matches!(m, StrictMsg::Renew { .. }) && self.strict.rng.chance(60) {
            self.strict.rng.range(50 * MS, 150 * MS)
        } else {
            0
        };
        self.post(Stream::Strict, from, to, Msg::Strict(m), extra);
    }

    fn strict_paused(&self, j: usize) -> bool {
        self.strict.nodes[j].paused_until > self.now.get()
    }

    /// One strict action.
    pub(super) fn strict_act(&mut self) {
        // Every running node's timers: lease upkeep, forwards, serving.
        for k in 0..NODES {
            if self.nodes[k].up && !self.strict_paused(k) {
                self.strict_upkeep(k);
                self.strict_work(k);
            }
        }
        let j = self.strict.rng.below(NODES as u64) as usize;
        let roll = self.strict.rng.below(1000);
        self.fold(roll);
        if !self.nodes[j].up {
            return;
        }
        match roll {
            0..=149 => {
                // A client may send to a paused node: the request waits for it.
                let count = self.strict.rng.range(1, 4);
                let start = self.now.get();
                self.strict.nodes[j].waiting.push(Caller { start, count });
                if !self.strict_paused(j) {
                    self.strict_work(j);
                }
            }
            150..=152 => {
                let k = self.strict_holder().unwrap_or(j);
                let until = self.now.get() + self.strict.rng.range(50 * MS, 400 * MS);
                let n = &mut self.strict.nodes[k];
                n.paused_until = n.paused_until.max(until);
                self.fold(0x9a);
            }
            153..=155 => {
                if let Some(k) = self.strict_holder() {
                    self.strict_stop(k);
                }
            }
            _ => {}
        }
    }

    /// A running node that holds the lease (as far as it knows), if any.
    fn strict_holder(&self) -> Option<usize> {
        (0..NODES).find(|&k| {
            self.nodes[k].up && !self.strict_paused(k) && self.strict.nodes[k].lease.is_some()
        })
    }

    /// The leader serves; a follower forwards its callers.
    fn strict_work(&mut self, j: usize) {
        let now = self.now.get();
        let n = &mut self.strict.nodes[j];
        // An overdue forward: the leader is discovered again.
        if let Some((_, b)) = n.forward.as_mut() {
            if b.to.is_some() && now - b.sent > STRICT_TIMEOUT {
                if b.to == n.hint {
                    n.hint = None;
                }
                b.to = None;
            }
        }
        if n.lease.is_some() {
            // A batch forwarded before this node led, not in flight: its callers are its own.
            if n.forward.as_ref().is_some_and(|(_, b)| b.to.is_none()) {
                if let Some((_, b)) = n.forward.take() {
                    n.waiting.splice(0..0, b.callers);
                }
            }
            if n.waiting.is_empty() && n.queued.is_empty() {
                return;
            }
            self.strict_serve(j);
            // Callers that waited too long for a term fail.
            let n = &mut self.strict.nodes[j];
            if n.waiting.iter().any(|c| now - c.start > WAIT_BOUND) {
                let (late, keep): (Vec<Caller>, Vec<Caller>) = n
                    .waiting
                    .drain(..)
                    .partition(|c| now - c.start > WAIT_BOUND);
                n.waiting = keep;
                for c in late {
                    self.strict_record(c, Vec::new());
                }
            }
            return;
        }
        if n.forward.is_none() && !n.waiting.is_empty() {
            // One batch in flight per follower: callers arriving meanwhile form the next.
            let callers = std::mem::take(&mut n.waiting);
            let batch = Batch {
                callers,
                to: None,
                sent: now,
                tries: 0,
            };
            let req = self.strict.req();
            self.strict.nodes[j].forward = Some((req, batch));
        }
        self.strict_route(j);
    }

    /// Sends the batch, if it is not in flight, to the known leader.
    fn strict_route(&mut self, j: usize) {
        let now = self.now.get();
        let n = &mut self.strict.nodes[j];
        let Some((req, mut batch)) = n.forward.take() else {
            return;
        };
        if batch.to.is_some() {
            n.forward = Some((req, batch));
            return;
        }
        let oldest = batch.callers.first().map_or(now, |c| c.start);
        if batch.tries >= FORWARD_TRIES || now - oldest > WAIT_BOUND {
            // No leader within the bound: the callers fail (never served locally).
            for c in batch.callers {
                self.strict_record(c, Vec::new());
            }
            return;
        }
        match n.hint.filter(|&h| h != j) {
            Some(leader) => {
                batch.to = Some(leader);
                batch.sent = now;
                batch.tries += 1;
                let counts = batch.callers.iter().map(|c| c.count).collect();
                let fresh = self.strict.req();
                self.strict.nodes[j].forward = Some((fresh, batch));
                self.strict_send(j, leader, StrictMsg::Forward { req: fresh, counts });
            }
            None => {
                // The next acquisition attempt (upkeep) finds the leader, or makes this node one.
                n.forward = Some((req, batch));
            }
        }
    }

    /// Acquire, renew, read the watermark, refill; calls without a reply are given up.
    fn strict_upkeep(&mut self, j: usize) {
        let now = self.now.get();
        let n = &mut self.strict.nodes[j];
        let local = n.local(now);
        let overdue = |at: u64| now - at > STRICT_TIMEOUT;
        if n.acquiring.is_some_and(|a| overdue(a.2)) {
            n.acquiring = None;
        }
        if n.renewing.is_some_and(|r| overdue(r.2)) {
            n.renewing = None;
        }
        if n.reading.is_some_and(|r| overdue(r.1)) {
            n.reading = None;
        }
        if n.refill.is_some_and(|r| overdue(r.1)) {
            // Commit unknown: the block, if granted, is never served.
            n.refill = None;
            n.buffer.refill_failed();
        }
        if n.lease.is_none() {
            // A node that knows a leader tries less often.
            let every = if n.hint.is_some() {
                5 * RETRY_EVERY
            } else {
                RETRY_EVERY
            };
            if n.acquiring.is_none() && now - n.tried_at >= every {
                n.tried_at = now;
                n.terms += 1;
                let request = lease_request(j, n.epoch, n.terms);
                let req = self.strict.req();
                self.strict.nodes[j].acquiring = Some((req, local, now));
                self.strict_send(j, STORE, StrictMsg::Acquire { req, request });
            }
            return;
        }
        if n.renewing.is_none() && local - n.renewed_sent >= RENEW_EVERY {
            let Some(lease) = n.lease.clone() else {
                return;
            };
            let req = self.strict.req();
            self.strict.nodes[j].renewing = Some((req, local, now));
            self.strict_send(j, STORE, StrictMsg::Renew { req, lease });
        }
        let n = &self.strict.nodes[j];
        if !n.ready && n.reading.is_none() {
            self.strict_read_watermark(j);
        }
        self.strict_refill(j, false);
    }

    fn strict_read_watermark(&mut self, j: usize) {
        let req = self.strict.req();
        self.strict.nodes[j].reading = Some((req, self.now.get()));
        self.strict_send(j, STORE, StrictMsg::ReadWatermark { req });
    }

    /// A refill for a node in its term: when the buffer runs low, or (`force`) at once.
    fn strict_refill(&mut self, j: usize, force: bool) {
        let now = self.now.get();
        let n = &mut self.strict.nodes[j];
        if !n.holds_term() || n.refill.is_some() {
            return;
        }
        let count = if force {
            n.buffer.force_refill(now)
        } else {
            n.buffer.start_refill(now)
        };
        let Some(count) = count else {
            return;
        };
        let req = self.strict.req();
        self.strict.nodes[j].refill = Some((req, now));
        self.strict_send(j, STORE, StrictMsg::Reserve { req, count });
    }

    /// The leader answers queued forwards, then its own callers, while its buffer holds
    /// enough. Each take is checked against the term's deadline *after* it: past it, the ids
    /// are burned and the forwards refused.
    fn strict_serve(&mut self, j: usize) {
        if !self.strict.nodes[j].holds_term() {
            self.strict_refuse_queued(j);
            return;
        }
        loop {
            let n = &self.strict.nodes[j];
            let (total, forward) = match (n.queued.first(), n.waiting.first()) {
                (Some(q), _) => (q.total, true),
                (None, Some(c)) => (c.count, false),
                (None, None) => break,
            };
            if n.buffer.buffered() < total {
                self.strict_refill(j, true);
                break;
            }
            let now = self.now.get();
            let n = &mut self.strict.nodes[j];
            let mut taken = Taken::new();
            n.buffer.take_for(&mut taken, total);
            let in_term = n.local(now) < n.deadline || self.bugs.on(STRICT_SERVES_AFTER_EXPIRY);
            if !in_term {
                n.buffer.burn_taken(taken);
                self.fold(0xe7);
                self.strict_refuse_queued(j);
                break;
            }
            let ids: Vec<u64> = taken.ids().collect();
            if forward {
                let q = n.queued.remove(0);
                self.checker.strict_served(j, &ids);
                for &id in &ids {
                    self.fold(id);
                }
                self.strict_send(j, q.from, StrictMsg::Ids { req: q.req, ids });
            } else {
                let c = n.waiting.remove(0);
                self.checker.strict_served(j, &ids);
                self.strict_record(c, ids);
            }
        }
        self.strict_refill(j, false);
    }

    fn strict_refuse_queued(&mut self, j: usize) {
        for q in std::mem::take(&mut self.strict.nodes[j].queued) {
            self.strict_send(j, q.from, StrictMsg::NotLeader { req: q.req });
        }
    }

    /// A caller's request ended: answered with `ids` (checked as served) or failed (none).
    fn strict_record(&mut self, c: Caller, ids: Vec<u64>) {
        for &id in &ids {
            self.fold(id);
        }
        self.strict.ops.push(Op {
            start: c.start,
            end: self.now.get(),
            ids,
        });
    }

    /// A clean stop of node `j`'s strict service: it stops serving, gives its unused tail
    /// back, releases the lease, and starts again as a follower. Its callers fail.
    pub(super) fn strict_stop(&mut self, j: usize) {
        let n = &mut self.strict.nodes[j];
        if let Some(lease) = n.lease.take() {
            n.ready = false;
            n.deadline = 0;
            let tail = n.buffer.take_unused_tail();
            if let Some(t) = tail {
                n.buffer.record_given_back(t.len());
            }
            let req = self.strict.req();
            self.strict_send(j, STORE, StrictMsg::Stop { req, tail, lease });
        }
        self.strict_refuse_queued(j);
        self.strict_crash(j);
    }

    /// Node `j`'s process stops: its callers fail, everything but its clock is lost.
    pub(super) fn strict_crash(&mut self, j: usize) {
        let n = &mut self.strict.nodes[j];
        let mut failed = std::mem::take(&mut n.waiting);
        if let Some((_, b)) = n.forward.take() {
            failed.extend(b.callers);
        }
        for c in failed {
            self.strict_record(c, Vec::new());
        }
        self.strict.nodes[j].reset();
    }

    pub(super) fn strict_at_store(&mut self, from: usize, m: StrictMsg) {
        let auth = &self.strict.auth.auth;
        let reply = match m {
            StrictMsg::Acquire { req, request } => match ready(auth.acquire(&request)) {
                Ok(lease) => StrictMsg::Acquired { req, lease },
                Err(LeaseError::Held { holder, .. }) => StrictMsg::Held {
                    req,
                    leader: node_of(&holder),
                },
                Err(_) => StrictMsg::Held { req, leader: None },
            },
            StrictMsg::Renew { req, lease } => match ready(auth.renew(&lease, 0)) {
                Ok(_) => StrictMsg::Renewed { req },
                Err(LeaseError::Superseded { .. }) => StrictMsg::Superseded { req },
                Err(_) => return,
            },
            StrictMsg::ReadWatermark { req } => StrictMsg::Watermark {
                req,
                watermark: self.strict.auth.watermark(),
            },
            StrictMsg::Reserve { req, count } => match ready(auth.reserve(&ns(), count)) {
                Ok(r) => {
                    self.checker.strict_grant(r.block.start(), r.block.end());
                    self.fold(r.block.start());
                    StrictMsg::Granted {
                        req,
                        block: r.block,
                    }
                }
                Err(_) => return,
            },
            StrictMsg::Stop { req, tail, lease } => {
                // At most once: a second delivery could pass the compare-and-swap again after
                // the range was granted anew (ABA).
                if self.strict.stopped.insert(req) {
                    let back = tail.map(|t| ready(auth.give_back(&ns(), t)));
                    let _ = ready(auth.release(&lease, 0));
                    let returned = matches!(back, Some(Ok(idmint_store::GiveBack::Returned)));
                    self.fold(u64::from(returned));
                }
                return;
            }
            _ => return,
        };
        self.strict_send(STORE, from, reply);
    }

    pub(super) fn strict_at_node(&mut self, from: usize, to: usize, m: StrictMsg) {
        let j = to;
        let until = self.strict.nodes[j].paused_until;
        if until > self.now.get() {
            // A paused process reads its messages when it resumes.
            self.sent += 1;
            self.queue
                .insert((until, self.sent), Box::new((from, to, Msg::Strict(m))));
            return;
        }
        let bugs = self.bugs;
        let n = &mut self.strict.nodes[j];
        match m {
            StrictMsg::Acquired { req, lease } => {
                let Some((r, sent_local, _)) = n.acquiring else {
                    return;
                };
                if r != req {
                    return;
                }
                n.acquiring = None;
                n.lease = Some(lease);
                n.ready = false;
                n.deadline = 0;
                n.renewed_sent = 0;
                n.extend(sent_local);
                n.hint = Some(j);
                self.fold(0x1ead);
                self.strict_read_watermark(j);
            }
            StrictMsg::Held { req, leader } if n.acquiring.map(|a| a.0) == Some(req) => {
                n.acquiring = None;
                if leader != Some(j) {
                    n.hint = leader;
                    self.strict_route(j);
                }
            }
            StrictMsg::Renewed { req } => {
                let Some((r, sent_local, _)) = n.renewing else {
                    return;
                };
                if r == req && n.lease.is_some() {
                    n.renewing = None;
                    n.extend(sent_local);
                }
            }
            StrictMsg::Superseded { req } if n.renewing.map(|r| r.0) == Some(req) => {
                n.lose_lease();
                self.strict_refuse_queued(j);
            }
            StrictMsg::Watermark { req, watermark } => {
                if n.reading.map(|r| r.0) != Some(req) || n.lease.is_none() {
                    return;
                }
                n.reading = None;
                if !bugs.on(STRICT_NEW_LEADER_BELOW_WATERMARK) {
                    n.buffer.raise_floor(watermark);
                }
                n.ready = true;
                self.strict_serve(j);
            }
            StrictMsg::Granted { req, block } => {
                if n.refill.map(|r| r.0) != Some(req) {
                    return;
                }
                n.refill = None;
                // A block below one held is refused (never served); the authority's blocks
                // increase, so this does not happen.
                let _ = n.buffer.refill_done(block);
                if n.lease.is_some() {
                    self.strict_serve(j);
                }
            }
            StrictMsg::Forward { req, counts } => {
                if !n.holds_term() {
                    self.strict_send(j, from, StrictMsg::NotLeader { req });
                    return;
                }
                let total = counts.iter().sum();
                n.queued.push(Queued { from, req, total });
                self.strict_serve(j);
            }
            StrictMsg::Ids { req, ids } => {
                let Some((r, batch)) = n.forward.take() else {
                    return;
                };
                if r != req {
                    n.forward = Some((r, batch));
                    return;
                }
                n.hint = Some(from);
                let mut rest = ids.as_slice();
                for c in batch.callers {
                    let k = usize::try_from(c.count)
                        .unwrap_or(usize::MAX)
                        .min(rest.len());
                    let (mine, more) = rest.split_at(k);
                    rest = more;
                    self.strict_record(c, mine.to_vec());
                }
                let n = &self.strict.nodes[j];
                if !n.waiting.is_empty() && n.lease.is_none() {
                    self.strict_work(j);
                }
            }
            StrictMsg::NotLeader { req } => {
                let Some((_, b)) = n.forward.as_mut().filter(|(r, _)| *r == req) else {
                    return;
                };
                b.to = None;
                if n.hint == Some(from) {
                    n.hint = None;
                }
                self.strict_route(j);
            }
            _ => {}
        }
    }

    /// At the end of a run: the strict history must be linearizable (and not empty). Returns
    /// the ids it checked.
    pub(super) fn strict_verdict(&mut self) -> u64 {
        match check(&self.strict.ops) {
            Ok(c) => c.ids as u64,
            Err(v) => {
                self.checker.fail(format!("strict namespace: {v}"));
                0
            }
        }
    }
}
