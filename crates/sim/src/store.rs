//! The backends as the simulation models them, around the real in-memory authority
//! (`idmint_store::MemoryAuthority`): two multi members (residue classes 0 and 1 of step 2)
//! and one lease table.
//!
//! Modelled here, not in the authority: idempotent retries (a reservation is keyed by its
//! request id, and a retry returns the grant the first attempt committed: a lost reply is
//! commit-unknown to the node, never a second grant), slow storage (a reservation reads the
//! watermark, then commits after a storage delay by compare-and-swap, re-reading if another
//! commit came first), a member wiped and re-created (a new incarnation, unrepaired until the
//! operator advances it past everything granted), a restore to a snapshot (a new incarnation,
//! repaired), and a wiped lease table re-seeded with the recorded floors.

use crate::bugs::{Bugs, TWO_PRIMARIES};
use crate::clock::{ready, SimClock};
use idmint_core::{Block, NamespaceName, SequenceSpec, Width};
use idmint_store::audit::Advance;
use idmint_store::lease::{LeaseRequest, WorkerChoice, WorkerLeases};
use idmint_store::{Authority, MemoryAuthority};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The sequence namespace.
pub fn ns() -> NamespaceName {
    NamespaceName::new("seq").expect("a valid name")
}

/// The snowflake lease group.
pub fn group() -> NamespaceName {
    NamespaceName::new("sf").expect("a valid name")
}

/// Member `m`'s spec: step 2, residue class `m`.
pub fn spec(m: usize) -> SequenceSpec {
    SequenceSpec::new(Width::Bits64, 1, 2, m as u64).expect("a valid spec")
}

/// One member: the real authority and what the simulation adds.
#[derive(Debug)]
pub struct Member {
    /// The real authority.
    pub auth: MemoryAuthority,
    /// Bumped when the member is wiped or restored.
    pub incarnation: u64,
    /// False from a wipe until the operator advanced it past every grant.
    pub repaired: bool,
    /// Committed reservations by request id (idempotent retries), with whether the member was
    /// repaired when it committed them.
    committed: BTreeMap<u64, (Block, bool)>,
    /// The highest block end ever granted, across incarnations (the operator's audit).
    pub high: u64,
    /// The latest snapshot's watermark.
    pub snapshot: u64,
}

impl Member {
    fn fresh(m: usize, clock: &SimClock, incarnation: u64, repaired: bool) -> Self {
        let auth = MemoryAuthority::with_clock(Arc::new(clock.clone()));
        ready(auth.ensure_namespace(&ns(), spec(m))).expect("creates the namespace");
        Member {
            auth,
            incarnation,
            repaired,
            committed: BTreeMap::new(),
            high: 0,
            snapshot: 0,
        }
    }

    /// The watermark.
    pub fn watermark(&self) -> u64 {
        ready(self.auth.state(&ns()))
            .ok()
            .flatten()
            .map_or(0, |s| s.watermark)
    }
}

/// What a reservation answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A block (new or, for a retry, the one committed before), and whether the member was
    /// repaired when it was committed.
    Granted(Block, bool),
    /// Another commit came first: read again after the storage delay.
    Conflict(u64),
    /// The namespace ran out or the call failed.
    Failed,
}

/// The store: both members and the lease table.
#[derive(Debug)]
pub struct Store {
    /// The members.
    pub members: [Member; 2],
    /// The lease table.
    pub leases: MemoryAuthority,
    clock: SimClock,
}

impl Store {
    /// Fresh members and an empty lease table on `clock`.
    pub fn new(clock: SimClock) -> Self {
        Store {
            members: [
                Member::fresh(0, &clock, 1, true),
                Member::fresh(1, &clock, 1, true),
            ],
            leases: MemoryAuthority::with_clock(Arc::new(clock.clone())),
            clock,
        }
    }

    /// The read half of a reservation: the watermark now.
    pub fn read(&self, m: usize) -> u64 {
        self.members[m].watermark()
    }

    /// The write half: commits `count` ids of member `m` for request `req` if the watermark is
    /// still `read` (compare-and-swap). Returns the answer and, for a new commit, the grant.
    pub fn commit(&mut self, bugs: Bugs, m: usize, req: u64, read: u64, count: u64) -> Answer {
        let member = &mut self.members[m];
        if let Some(&(block, repaired)) = member.committed.get(&req) {
            return Answer::Granted(block, repaired);
        }
        let now = member.watermark();
        let block = if bugs.on(TWO_PRIMARIES) {
            // Blind: the block computed from the read, the watermark only raised.
            let Ok(block) = spec(m).reserve(read, count) else {
                return Answer::Failed;
            };
            if ready(member.auth.advance(&ns(), block.end(), Advance::Rebase)).is_err() {
                return Answer::Failed;
            }
            block
        } else {
            if now != read {
                return Answer::Conflict(now);
            }
            match ready(member.auth.reserve(&ns(), count)) {
                Ok(r) => r.block,
                Err(_) => return Answer::Failed,
            }
        };
        member.committed.insert(req, (block, member.repaired));
        member.high = member.high.max(block.end());
        Answer::Granted(block, member.repaired)
    }

    /// The authority's compare-and-swap give-back of `tail` to member `m`.
    pub fn give_back(&mut self, m: usize, tail: Block) -> bool {
        matches!(
            ready(self.members[m].auth.give_back(&ns(), tail)),
            Ok(idmint_store::GiveBack::Returned)
        )
    }

    /// An operator's rebase of every member to at least `to`.
    pub fn rebase(&mut self, to: u64) {
        for member in &mut self.members {
            let _ = ready(member.auth.advance(&ns(), to, Advance::Rebase));
        }
    }

    /// Member `m` loses its data and is re-created from its first id.
    pub fn wipe(&mut self, m: usize) {
        let inc = self.members[m].incarnation + 1;
        let high = self.members[m].high;
        self.members[m] = Member::fresh(m, &self.clock, inc, false);
        self.members[m].high = high;
    }

    /// The operator advances a wiped member past everything it ever granted.
    pub fn repair(&mut self, m: usize) {
        let member = &mut self.members[m];
        if member.repaired {
            return;
        }
        let _ = ready(member.auth.advance(&ns(), member.high, Advance::Rebase));
        member.repaired = true;
    }

    /// Member `m` is restored to its snapshot. Returns the restored watermark.
    pub fn restore(&mut self, m: usize) -> u64 {
        let inc = self.members[m].incarnation + 1;
        let (high, snapshot) = (self.members[m].high, self.members[m].snapshot);
        self.members[m] = Member::fresh(m, &self.clock, inc, true);
        if snapshot > 0 {
            let _ = ready(
                self.members[m]
                    .auth
                    .advance(&ns(), snapshot, Advance::Rebase),
            );
        }
        self.members[m].high = high;
        self.members[m].snapshot = snapshot;
        self.members[m].watermark()
    }

    /// The lease table is lost; the operator re-seeds every worker id's recorded floor (each
    /// acquired and released once by the operator, so tokens start again at 1).
    pub fn wipe_leases(&mut self, request: &LeaseRequest) {
        let slots = ready(self.leases.group(&group()))
            .ok()
            .flatten()
            .map(|(_, s)| s)
            .unwrap_or_default();
        self.leases = MemoryAuthority::with_clock(Arc::new(self.clock.clone()));
        for slot in slots {
            let seed = LeaseRequest {
                choice: WorkerChoice::Exactly(slot.worker),
                holder: "operator".into(),
                ..request.clone()
            };
            if let Ok(lease) = ready(self.leases.acquire(&seed)) {
                let _ = ready(self.leases.release(&lease, slot.floor_unix_ms));
            }
        }
    }
}
