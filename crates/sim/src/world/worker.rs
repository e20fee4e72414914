//! The snowflake side of the world: each node's worker lease and generator.

use super::*;

impl World {
    pub(super) fn worker_tick(&mut self, i: usize) {
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

    pub(super) fn snowflakes(&mut self, i: usize) {
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

    pub(super) fn release_worker(&mut self, i: usize) {
        let w = &mut self.nodes[i].worker;
        if let (Some(lease), Some(g)) = (w.lease.take(), w.generator.take()) {
            g.set_limit(0);
            let floor_ms = g
                .last_timestamp()
                .map_or(0, |ts| layout().unix_nanos_of(ts + 1) / MS + 1);
            let _ = ready(self.store.leases.release(&lease, floor_ms));
        }
    }

    pub(super) fn acquired(&mut self, i: usize, req: u64, lease: WorkerLease) {
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

    /// A renewal succeeded: the limit rises to its durable floor, and never past the time it
    /// was sent plus the TTL minus the safety margin, on the generator's own clock.
    pub(super) fn renewed(&mut self, to: usize, req: u64, lease: WorkerLease) {
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
            g.set_limit(limit);
        }
    }

    /// The lease was lost: its generator stops for good; a new lease is acquired later.
    pub(super) fn superseded(&mut self, to: usize, req: u64) {
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
}
