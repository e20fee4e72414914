//! The store's side of the world: reservations with slow storage and compare-and-swap,
//! give-backs, and the lease table.

use super::*;

impl World {
    pub(super) fn at_store(&mut self, from: usize, msg: Msg) {
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
            Msg::Strict(m) => self.strict_at_store(from, m),
            Msg::Shard(m) => self.shard_at_store(from, m),
            _ => {}
        }
    }
}
