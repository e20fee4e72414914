//! The sequence side of the world: client requests, refills, leases to the lower tier,
//! give-backs, rebases and restores.

use super::*;

impl World {
    pub(super) fn client_take(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        if n.poisoned {
            return;
        }
        if n.buffer.buffered() == 0 {
            self.refill(i);
            return;
        }
        // Mostly small; one request in ten large enough to span blocks of both members.
        let count = if self.rng.chance(100) {
            self.rng.range(6, 40)
        } else {
            self.rng.range(1, 5)
        };
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

    pub(super) fn complete(&mut self, i: usize) {
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

    pub(super) fn refill(&mut self, i: usize) {
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

    pub(super) fn pick_member(&mut self, i: usize) -> usize {
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
    pub(super) fn direct(&mut self, i: usize) {
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

    pub(super) fn reserve_direct(&mut self, i: usize, count: u64, lease_for: Option<(usize, u64)>) {
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

    pub(super) fn give_back(&mut self, i: usize) {
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
    pub(super) fn graceful_stop(&mut self, i: usize) {
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
        self.strict_stop(i);
        self.shard_stop(i);
        self.nodes[i].up = false;
        self.restart(i);
    }

    pub(super) fn crash(&mut self, i: usize) {
        self.nodes[i].up = false;
        self.strict_crash(i);
        self.shard_crash(i);
        self.fold(0xc0);
    }

    pub(super) fn restart(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.up = true;
        n.epoch += 1;
        n.reset();
        if n.record.era != self.era {
            n.record.era = self.era;
        }
    }

    pub(super) fn rebase(&mut self) {
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

    pub(super) fn restore(&mut self, m: usize) {
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

    #[allow(clippy::too_many_arguments)]
    pub(super) fn granted(
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

    pub(super) fn lease_req(
        &mut self,
        i: usize,
        from: usize,
        req: u64,
        count: u64,
        min_start: u64,
    ) {
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
}
