//! The shard-owned snowflake namespace in the world (crate::shards describes the node's design).
//!
//! Every step takes one shard action besides the world's own, drawn from the shard stream: a
//! client request for a random shard at a node, a pause of a range holder (a stopped process:
//! its clocks run on, its messages wait), a step of a node's wall clock, or a clean stop of a
//! node's shard service; and every running node's timers run (renewals, acquisitions, waiting
//! requests, forwards given up). The world's crashes, restarts, graceful stops and partitions
//! apply to it; renewals are sometimes delayed past the TTL. Every answer a holder issues is
//! checked as it is issued (`Checker::shard_issued`), against the lease table as it is then.

use super::*;
use crate::shards::{
    layout, lease_request, range_of, ts_of_ms, Pending, ShardMsg, FLOOR_AHEAD_MS, LOGICAL_SHARDS,
    RANGES, RENEW_EVERY, RETRY_EVERY, TICK, TIMEOUT as SHARD_TIMEOUT, WAIT_BOUND,
};
use crate::strict::node_of;
use idmint_core::Clock;

impl World {
    fn shard_send(&mut self, from: usize, to: usize, m: ShardMsg) {
        // A renewal is sometimes held up past the TTL (a slow network path, a stalled write).
        let extra = if matches!(m, ShardMsg::Renew { .. }) && self.shards.rng.chance(60) {
            self.shards.rng.range(50 * MS, 150 * MS)
        } else {
            0
        };
        self.post(Stream::Shards, from, to, Msg::Shard(m), extra);
    }

    fn shard_paused(&self, j: usize) -> bool {
        self.shards.nodes[j].paused_until > self.now.get()
    }

    /// One shard action, after every running node's timers.
    pub(super) fn shards_act(&mut self) {
        let now = self.now.get();
        if now >= self.shards.next_tick {
            self.shards.next_tick = now + TICK;
            for k in 0..NODES {
                if self.nodes[k].up && !self.shard_paused(k) {
                    self.shard_upkeep(k);
                }
            }
        }
        let j = self.shards.rng.below(NODES as u64) as usize;
        let roll = self.shards.rng.below(1000);
        self.fold(roll);
        if !self.nodes[j].up {
            return;
        }
        match roll {
            0..=99 => {
                let p = Pending {
                    shard: self.shards.rng.below(LOGICAL_SHARDS),
                    count: self.shards.rng.range(1, 4),
                    start: self.now.get(),
                };
                self.shard_request(j, p);
            }
            100..=103 => {
                // A holder, if any runs: the first from `j` on.
                let k = (0..NODES)
                    .map(|d| (j + d) % NODES)
                    .find(|&k| {
                        self.nodes[k].up
                            && self.shards.nodes[k]
                                .ranges
                                .iter()
                                .any(|r| r.lease.is_some())
                    })
                    .unwrap_or(j);
                let until = self.now.get() + self.shards.rng.range(50 * MS, 400 * MS);
                let n = &mut self.shards.nodes[k];
                n.paused_until = n.paused_until.max(until);
                self.fold(0x5a);
            }
            104..=107 => {
                let by = self.shards.rng.range(0, 300 * MS) as i64 - (150 * MS) as i64;
                self.shards.nodes[j].clock.step(by);
            }
            108..=109 => self.shard_stop(j),
            _ => {}
        }
    }

    /// A client's request at node `j`: served if `j` holds the shard's range, forwarded to the
    /// holder it knows, or parked while `j` acquires the range (or learns its holder). A
    /// paused node's requests wait for it.
    fn shard_request(&mut self, j: usize, p: Pending) {
        let r = range_of(p.shard);
        let paused = self.shard_paused(j);
        let rs = &mut self.shards.nodes[j].ranges[r];
        if paused || rs.lease.is_some() || rs.hint.is_none_or(|h| h == j) {
            rs.waiting.push(p);
            if !paused {
                self.shard_route(j, r);
            }
            return;
        }
        if let Some(h) = rs.hint {
            self.shard_forward(j, h, p);
        }
    }

    /// Range `r`'s waiting requests at node `j`: served if it holds the range, forwarded if it
    /// knows the holder, else an acquisition; those waiting too long fail.
    fn shard_route(&mut self, j: usize, r: usize) {
        let now = self.now.get();
        let rs = &mut self.shards.nodes[j].ranges[r];
        if rs.waiting.is_empty() {
            return;
        }
        if rs.lease.is_some() {
            let waiting = std::mem::take(&mut rs.waiting);
            let mut keep = Vec::new();
            for p in waiting {
                if self.shard_issue(j, p.shard, p.count).is_some() {
                    self.shards.answered += 1;
                } else if now - p.start > WAIT_BOUND {
                    self.shards.failed += 1;
                } else {
                    keep.push(p);
                }
            }
            self.shards.nodes[j].ranges[r].waiting = keep;
            return;
        }
        if let Some(h) = rs.hint.filter(|&h| h != j) {
            for p in std::mem::take(&mut rs.waiting) {
                self.shard_forward(j, h, p);
            }
            return;
        }
        let before = rs.waiting.len();
        rs.waiting.retain(|p| now - p.start <= WAIT_BOUND);
        let late = (before - rs.waiting.len()) as u64;
        self.shards.failed += late;
        let rs = &mut self.shards.nodes[j].ranges[r];
        if rs.acquiring.is_none() && (rs.tried_at == 0 || now - rs.tried_at >= RETRY_EVERY) {
            rs.tried_at = now;
            let n = &mut self.shards.nodes[j];
            n.acquisitions += 1;
            let request = lease_request(&self.shards.group, j, n.epoch, n.acquisitions, r);
            let local = n.clock.local(now);
            let req = self.shards.req();
            self.shards.nodes[j].ranges[r].acquiring = Some((req, local, now));
            self.shard_send(j, STORE, ShardMsg::Acquire { req, request });
        }
    }

    /// One hop to the holder `h`; the answer (or refusal) comes back to `j`.
    fn shard_forward(&mut self, j: usize, h: usize, p: Pending) {
        let req = self.shards.req();
        self.shards.nodes[j]
            .forwarded
            .insert(req, (p, self.now.get()));
        self.shard_send(
            j,
            h,
            ShardMsg::Forward {
                req,
                shard: p.shard,
                count: p.count,
            },
        );
    }

    /// Holder `j` issues up to `count` ids of `shard`, if it may: it holds the range, its
    /// deadline has not passed, its wall clock reached the floor it was granted, and the floor
    /// its last renewal recorded is above the generator's time. Each answer is checked here.
    fn shard_issue(&mut self, j: usize, shard: u64, count: u64) -> Option<Vec<u64>> {
        let now = self.now.get();
        let bugs = self.bugs;
        let n = &mut self.shards.nodes[j];
        let local = n.clock.local(now);
        let wall_ms = n.clock.wall_nanos() / MS;
        let r = range_of(shard);
        let rs = &mut n.ranges[r];
        let (token, holder) = rs.lease.as_ref().map(|l| (l.token, l.holder.clone()))?;
        if local >= rs.deadline && !bugs.on(SHARD_SERVES_AFTER_EXPIRY) {
            return None;
        }
        if !rs.generators.contains_key(&shard) {
            let heed = !bugs.on(SHARD_TAKEOVER_BELOW_FLOOR);
            if heed && wall_ms < rs.granted_floor_ms {
                // The takeover waits for its clock to reach the floor.
                return None;
            }
            let resume = (heed && rs.granted_floor_ms > 0)
                .then(|| ts_of_ms(rs.granted_floor_ms).saturating_sub(1));
            let g = SnowflakeGenerator::new(layout(), shard, n.clock.clone(), resume).ok()?;
            g.set_limit(ts_of_ms(rs.recorded_floor_ms));
            rs.generators.insert(shard, g);
        }
        let mut ids = Vec::new();
        rs.generators.get(&shard)?.next_ids(count, &mut ids).ok()?;
        let live = ready(self.shards.leases.group(&self.shards.group))
            .ok()
            .flatten()
            .and_then(|(_, slots)| slots.into_iter().find(|s| s.worker == r as u64))
            .is_some_and(|s| s.is_live() && s.token == token && s.holder == holder);
        self.checker.shard_issued(j, shard, token, live, &ids);
        for &id in &ids {
            self.fold(id);
        }
        Some(ids)
    }

    /// Node `j`'s timers: calls without a reply given up, renewals, waiting requests.
    fn shard_upkeep(&mut self, j: usize) {
        let now = self.now.get();
        let overdue = |at: u64| now - at > SHARD_TIMEOUT;
        let n = &mut self.shards.nodes[j];
        let before = n.forwarded.len();
        let mut lost = [false; RANGES];
        if n.forwarded.values().any(|(_, sent)| overdue(*sent)) {
            n.forwarded.retain(|_, (p, sent)| {
                let keep = !overdue(*sent);
                if !keep {
                    lost[range_of(p.shard)] = true;
                }
                keep
            });
        }
        self.shards.failed += (before - self.shards.nodes[j].forwarded.len()) as u64;
        for (r, unanswered) in lost.into_iter().enumerate() {
            let n = &mut self.shards.nodes[j];
            let local = n.clock.local(now);
            let rs = &mut n.ranges[r];
            if unanswered {
                // The holder did not answer: found again by the next acquisition attempt.
                rs.hint = None;
            }
            if rs.acquiring.is_some_and(|a| overdue(a.2)) {
                rs.acquiring = None;
            }
            if rs.renewing.is_some_and(|a| overdue(a.2)) {
                rs.renewing = None;
            }
            if rs.lease.is_some() && rs.renewing.is_none() && local - rs.renewed_sent >= RENEW_EVERY
            {
                self.shard_renew(j, r);
            }
            self.shard_route(j, r);
        }
    }

    /// A renewal of node `j`'s lease on range `r`, recording a floor ahead of its generators'
    /// time (and of its wall clock, for generators not made yet).
    fn shard_renew(&mut self, j: usize, r: usize) {
        let now = self.now.get();
        let n = &self.shards.nodes[j];
        let local = n.clock.local(now);
        let rs = &n.ranges[r];
        let Some(lease) = rs.lease.clone() else {
            return;
        };
        let time = rs
            .generators
            .values()
            .map(|g| g.now_unix_nanos())
            .fold(n.clock.wall_nanos(), u64::max);
        let floor_ms = time / MS + FLOOR_AHEAD_MS;
        let req = self.shards.req();
        self.shards.nodes[j].ranges[r].renewing = Some((req, local, now));
        self.shard_send(
            j,
            STORE,
            ShardMsg::Renew {
                req,
                lease,
                floor_ms,
            },
        );
    }

    /// A clean stop of node `j`'s shard service: it stops issuing, releases every range it
    /// holds with a floor above every timestamp it issued, and starts again. Its requests fail.
    pub(super) fn shard_stop(&mut self, j: usize) {
        let mut releases = Vec::new();
        for rs in &mut self.shards.nodes[j].ranges {
            if let Some(lease) = rs.lease.clone() {
                let floor_ms = rs.release_floor_ms();
                rs.drop_lease();
                releases.push(ShardMsg::Release { lease, floor_ms });
            }
        }
        for m in releases {
            self.shard_send(j, STORE, m);
        }
        self.shard_crash(j);
    }

    /// Node `j`'s process stops: its requests fail, everything but its clock is lost.
    pub(super) fn shard_crash(&mut self, j: usize) {
        let n = &mut self.shards.nodes[j];
        let lost = n.forwarded.len() + n.ranges.iter().map(|r| r.waiting.len()).sum::<usize>();
        self.shards.failed += lost as u64;
        n.reset();
    }

    pub(super) fn shard_at_store(&mut self, from: usize, m: ShardMsg) {
        let leases = &self.shards.leases;
        let reply = match m {
            ShardMsg::Acquire { req, request } => match ready(leases.acquire(&request)) {
                Ok(lease) => ShardMsg::Acquired { req, lease },
                Err(LeaseError::Held { holder, .. }) => ShardMsg::Held {
                    req,
                    holder: node_of(&holder),
                },
                Err(_) => ShardMsg::Held { req, holder: None },
            },
            ShardMsg::Renew {
                req,
                lease,
                floor_ms,
            } => match ready(leases.renew(&lease, floor_ms)) {
                Ok(lease) => ShardMsg::Renewed { req, lease },
                Err(LeaseError::Superseded { .. }) => ShardMsg::Superseded { req },
                Err(_) => return,
            },
            ShardMsg::Release { lease, floor_ms } => {
                let done = ready(leases.release(&lease, floor_ms)).is_ok();
                self.fold(u64::from(done));
                return;
            }
            _ => return,
        };
        self.shard_send(STORE, from, reply);
    }

    pub(super) fn shard_at_node(&mut self, from: usize, to: usize, m: ShardMsg) {
        let j = to;
        let until = self.shards.nodes[j].paused_until;
        if until > self.now.get() {
            // A paused process reads its messages when it resumes.
            self.sent += 1;
            self.queue
                .insert((until, self.sent), Box::new((from, to, Msg::Shard(m))));
            return;
        }
        let n = &mut self.shards.nodes[j];
        match m {
            ShardMsg::Acquired { req, lease } => {
                let Some(r) = n
                    .ranges
                    .iter()
                    .position(|rs| rs.acquiring.is_some_and(|a| a.0 == req))
                else {
                    return;
                };
                let rs = &mut n.ranges[r];
                let sent_local = rs.acquiring.map_or(0, |a| a.1);
                rs.acquiring = None;
                rs.drop_lease();
                rs.granted_floor_ms = lease.floor_unix_ms;
                rs.recorded_floor_ms = lease.floor_unix_ms;
                rs.renewed_sent = 0;
                rs.extend(sent_local);
                rs.hint = None;
                rs.lease = Some(lease);
                self.fold(0x1ead);
                // The first renewal records a floor to issue below.
                self.shard_renew(j, r);
            }
            ShardMsg::Held { req, holder } => {
                let Some(r) = n
                    .ranges
                    .iter()
                    .position(|rs| rs.acquiring.is_some_and(|a| a.0 == req))
                else {
                    return;
                };
                let rs = &mut n.ranges[r];
                rs.acquiring = None;
                rs.hint = holder.filter(|&h| h != j);
                self.shard_route(j, r);
            }
            ShardMsg::Renewed { req, lease } => {
                let Some(r) = n
                    .ranges
                    .iter()
                    .position(|rs| rs.renewing.is_some_and(|a| a.0 == req))
                else {
                    return;
                };
                let rs = &mut n.ranges[r];
                let sent_local = rs.renewing.map_or(0, |a| a.1);
                rs.renewing = None;
                if rs.lease.as_ref().map(|l| l.token) != Some(lease.token) {
                    return;
                }
                rs.extend(sent_local);
                rs.recorded_floor_ms = rs.recorded_floor_ms.max(lease.floor_unix_ms);
                let limit = ts_of_ms(rs.recorded_floor_ms);
                for g in rs.generators.values() {
                    g.set_limit(limit);
                }
                rs.lease = Some(lease);
                self.shard_route(j, r);
            }
            ShardMsg::Superseded { req } => {
                if let Some(rs) = n
                    .ranges
                    .iter_mut()
                    .find(|rs| rs.renewing.is_some_and(|a| a.0 == req))
                {
                    rs.drop_lease();
                    rs.hint = None;
                }
            }
            ShardMsg::Forward { req, shard, count } => {
                // One hop: a node that does not serve the range refuses, never forwards.
                let reply = match self.shard_issue(j, shard, count) {
                    Some(ids) => ShardMsg::Ids { req, ids },
                    None => ShardMsg::Refused { req },
                };
                self.shard_send(j, from, reply);
            }
            ShardMsg::Ids { req, ids } => {
                // The ids were checked as the holder issued them; a late answer is dropped.
                let waited = n.forwarded.remove(&req).is_some();
                if waited {
                    self.shards.answered += 1;
                    self.shards.forwarded_answers += 1;
                    self.fold(ids.len() as u64);
                }
            }
            ShardMsg::Refused { req } => {
                if let Some((p, _)) = n.forwarded.remove(&req) {
                    let rs = &mut n.ranges[range_of(p.shard)];
                    if rs.hint == Some(from) {
                        rs.hint = None;
                    }
                    self.shards.failed += 1;
                }
            }
            _ => {}
        }
    }
}
