//! One checker over everything the hosts' nodes answer, across every host and every run.
//!
//! Rules, each checked as the answer arrives:
//! - **unique**: no id is answered twice, by any host in any run;
//! - **increasing per writer**: the answers of one run of one host, in the order they
//!   arrive, increase (each answer's ids too);
//! - **above the rebase**: once an operator's rebase through host `h`'s run `r` answered (its
//!   floor `F`: every id from now on at or above it), no request that `h`'s run `r` sends after
//!   that is answered an id below `F`, nor any request of a run that started after it on a
//!   data directory no run used since before it was sent ("a rebase while the node was stopped",
//!   docs/uniqueness.md invariant 3). Runs alive at the rebase may still serve what they
//!   buffered (unique, below the floor, as docs/design.md says of `Node::advance`), and so
//!   may their next run: what they park at their stop is accepted below the floor;
//! - **nothing from a retired namespace**, with the same scope;
//! - **accounted**: a serving node with no request in flight has
//!   `reserved = served + buffered + burned + given back`, and its `served` is exactly what
//!   this checker saw it answer in that run.
//!
//! Orders are the world's event numbers (`at`): a request is numbered when it is sent, a run
//! when it is started, a move when its answer is read; the world reads answers after the step
//! that produced them, so a move's number is never earlier than its real completion.

use std::collections::HashMap;

/// A run: (host, run number).
pub type RunId = (usize, u32);

/// A supply's counters, as its snapshot reports them.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    /// Ids reserved from the store (received in blocks, kept blocks adopted included).
    pub reserved: u64,
    /// Ids of answers returned.
    pub served: u64,
    /// Ids buffered.
    pub buffered: u64,
    /// Ids burned.
    pub burned: u64,
    /// Ids given back.
    pub given_back: u64,
}

/// An operator's move of the watermark that answered.
#[derive(Debug, Clone, Copy)]
struct Move {
    by: RunId,
    sent: u64,
    at: u64,
    floor: u64,
    retired: bool,
}

/// The checker's state. See the module docs.
#[derive(Debug, Default)]
pub struct Checker {
    owner: HashMap<u64, (RunId, u64)>,
    last: HashMap<RunId, u64>,
    /// Each run's start, and when its data directory was last left by a run before it.
    started: HashMap<RunId, (u64, u64)>,
    answered: HashMap<RunId, u64>,
    moves: Vec<Move>,
    ids: u64,
}

impl Checker {
    /// Run `run` was started at `at` on a data directory whose last run ended at `dir_free`.
    pub fn run_started(&mut self, run: RunId, at: u64, dir_free: u64) {
        self.started.insert(run, (at, dir_free));
    }

    /// An operator's rebase (floor: the first id allowed) or retirement through `by`, sent at
    /// `sent`, answered (read at `at`).
    pub fn moved(&mut self, by: RunId, sent: u64, at: u64, floor: u64, retired: bool) {
        self.moves.push(Move {
            by,
            sent,
            at,
            floor,
            retired,
        });
    }

    /// Ids answered so far.
    pub fn ids(&self) -> u64 {
        self.ids
    }

    /// `run` answered `ids` to request `req`, sent at `sent`.
    pub fn answered(&mut self, run: RunId, req: u64, sent: u64, ids: &[u64]) -> Result<(), String> {
        let who = |(h, r): RunId| format!("h{h}#{r}");
        if ids.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!(
                "{} answered request {req} with ids out of order: {ids:?}",
                who(run)
            ));
        }
        let (Some(&first), Some(&last)) = (ids.first(), ids.last()) else {
            return Ok(());
        };
        if let Some(&before) = self.last.get(&run) {
            if first <= before {
                return Err(format!(
                    "{} answered request {req} with {first} after it answered {before}",
                    who(run)
                ));
            }
        }
        let (started, dir_free) = self.started.get(&run).copied().unwrap_or((0, 0));
        for m in &self.moves {
            let bound = m.at < sent && (m.by == run || (started > m.at && dir_free < m.sent));
            if !bound {
                continue;
            }
            if m.retired {
                return Err(format!(
                    "{} answered request {req} ({ids:?}) from a namespace {} retired",
                    who(run),
                    who(m.by)
                ));
            }
            if first < m.floor {
                return Err(format!(
                    "{} answered request {req} with {first}, below the rebase floor {} set through {}",
                    who(run),
                    m.floor,
                    who(m.by)
                ));
            }
        }
        for &id in ids {
            if let Some(&(other, other_req)) = self.owner.get(&id) {
                return Err(format!(
                    "id {id} answered twice: by {} (request {other_req}) and by {} (request {req})",
                    who(other),
                    who(run)
                ));
            }
            self.owner.insert(id, (run, req));
        }
        self.last.insert(run, last);
        *self.answered.entry(run).or_default() += ids.len() as u64;
        self.ids += ids.len() as u64;
        Ok(())
    }

    /// The supply of `run`'s namespace with no request in flight.
    pub fn at_rest(&self, run: RunId, s: &Counts) -> Result<(), String> {
        let accounted = s.served + s.buffered + s.burned + s.given_back;
        if s.reserved != accounted {
            return Err(format!(
                "h{}#{}: reserved {} but served {} + buffered {} + burned {} + given back {} = {accounted}",
                run.0, run.1, s.reserved, s.served, s.buffered, s.burned, s.given_back
            ));
        }
        let seen = self.answered.get(&run).copied().unwrap_or(0);
        if s.served != seen {
            return Err(format!(
                "h{}#{}: its supply counts {} ids served, its answers held {seen}",
                run.0, run.1, s.served
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_refuses_its_violation() {
        let mut c = Checker::default();
        c.run_started((0, 1), 0, 0);
        c.answered((0, 1), 1, 1, &[1, 2]).unwrap();
        assert!(c
            .answered((1, 1), 2, 2, &[2])
            .unwrap_err()
            .contains("twice"));
        assert!(c
            .answered((0, 1), 3, 3, &[0])
            .unwrap_err()
            .contains("after"));
        c.moved((0, 1), 4, 4, 100, false);
        // Another run started before the move may still serve below it.
        c.run_started((1, 1), 0, 0);
        c.answered((1, 1), 5, 5, &[10]).unwrap();
        assert!(c
            .answered((0, 1), 6, 6, &[50])
            .unwrap_err()
            .contains("below"));
        // A run on a data directory left before the move: bound; left after it: not.
        c.run_started((2, 1), 7, 3);
        assert!(c
            .answered((2, 1), 8, 8, &[60])
            .unwrap_err()
            .contains("below"));
        c.run_started((1, 2), 7, 5);
        c.answered((1, 2), 8, 8, &[70]).unwrap();
        c.moved((1, 1), 9, 9, 0, true);
        assert!(c
            .answered((1, 1), 10, 10, &[200])
            .unwrap_err()
            .contains("retired"));
    }
}
