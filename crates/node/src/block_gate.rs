//! The ids a sequence namespace may hand out ([`IdSpace`]), and the gate every block from a
//! source passes before any id of it is buffered or answered ([`BlockGate`];
//! docs/uniqueness.md, "Every block is verified").
//!
//! The authority computes blocks and the node trusts nothing it did not check: a member of a
//! multi authority with a stale spec, a backend bug or a hand-edited record must never put an
//! id of another namespace's shape into an answer. A block passes only if
//! - its step is the namespace's step;
//! - its residue class (`start % step`) is one the authority owns for the namespace: the spec's
//!   offset for a single authority, every member's offset for a multi authority;
//! - its first id is at or after the namespace's first id and its last id fits the width;
//! - it starts at or above the end of every earlier block of its residue class from this source
//!   (a watermark never goes down while the node runs: the only lowering is the hand-back at
//!   shutdown, after which no block is asked for). This order check applies to the blocks of
//!   one refill task, which reserves one block at a time ([`BlockGate::admit`]); reservations
//!   made concurrently by requests with the cache off may return in any order, so those get
//!   the shape checks only ([`BlockGate::admit_concurrent`]).
//!
//! A block that fails is refused whole; the caller stops serving the namespace (a refused block
//! means the source cannot be trusted any more) and logs why.

use idmint_core::{Block, SequenceSpec};
use std::num::NonZeroU64;
use std::sync::Mutex;
use thiserror::Error;

/// The ids of a sequence namespace as this node serves it: its spec and the residue classes
/// its authority grants (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdSpace {
    spec: SequenceSpec,
    residues: Vec<u64>,
    /// With a multi authority: each member's residue class, in configuration order (member
    /// `k` is at `k - 1`).
    members: Option<Vec<u64>>,
}

impl IdSpace {
    /// `spec`'s ids of the residue classes `residues` (modulo `spec.step()`); with no residue
    /// given, the spec's own offset.
    pub fn new(spec: SequenceSpec, mut residues: Vec<u64>) -> Self {
        residues.retain(|r| *r < spec.step());
        if residues.is_empty() {
            residues.push(spec.offset());
        }
        residues.sort_unstable();
        residues.dedup();
        IdSpace {
            spec,
            residues,
            members: None,
        }
    }

    /// `spec`'s ids of a multi authority whose members own `offsets`, in configuration order.
    pub fn of_members(spec: SequenceSpec, offsets: Vec<u64>) -> Self {
        IdSpace {
            members: Some(offsets.clone()),
            ..IdSpace::new(spec, offsets)
        }
    }

    /// `spec`'s own ids (a single authority).
    pub fn single(spec: SequenceSpec) -> Self {
        IdSpace::new(spec, Vec::new())
    }

    /// The spec.
    pub fn spec(&self) -> SequenceSpec {
        self.spec
    }

    /// The residue classes, sorted.
    pub fn residues(&self) -> &[u64] {
        &self.residues
    }

    /// The residue class of `id`: `id % step`.
    pub fn residue_of(&self, id: u64) -> u64 {
        id % self.spec.step()
    }

    /// With a multi authority, the member (from 1, in configuration order) owning `id`'s
    /// residue class; `None` with a single authority or when no member owns it.
    pub fn member_of(&self, id: u64) -> Option<usize> {
        let step = NonZeroU64::new(self.spec.step())?;
        idmint_core::keys::member_of(id, step, self.members.as_deref()?)
    }

    /// Whether `id` is one this namespace may ever hand out.
    pub fn contains(&self, id: u64) -> bool {
        id >= self.spec.first()
            && id <= self.spec.width().max_id()
            && self.residues.contains(&(id % self.spec.step()))
    }

    /// The checks of a block that need no history: step, residue class, first id, width.
    pub fn check(&self, block: &Block) -> Result<(), BlockMismatch> {
        let step = self.spec.step();
        if block.step() != step {
            return Err(BlockMismatch::Step {
                got: block.step(),
                want: step,
            });
        }
        let residue = block.start() % step;
        if !self.residues.contains(&residue) {
            return Err(BlockMismatch::Residue {
                got: residue,
                want: self.residues.clone(),
            });
        }
        if block.start() < self.spec.first() {
            return Err(BlockMismatch::BelowFirst {
                start: block.start(),
                first: self.spec.first(),
            });
        }
        if block.last() > self.spec.width().max_id() {
            return Err(BlockMismatch::AboveWidth {
                last: block.last(),
                bits: self.spec.width().bits(),
            });
        }
        Ok(())
    }
}

/// Why a block was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BlockMismatch {
    /// Another step than the namespace's.
    #[error("step {got}, but the namespace's step is {want}")]
    Step {
        /// The block's.
        got: u64,
        /// The namespace's.
        want: u64,
    },
    /// A residue class the authority does not own for the namespace.
    #[error("residue class {got}, but the namespace's ids are of the classes {want:?}")]
    Residue {
        /// The block's.
        got: u64,
        /// The namespace's.
        want: Vec<u64>,
    },
    /// Starts below the namespace's first id.
    #[error("it starts at {start}, below the namespace's first id {first}")]
    BelowFirst {
        /// The block's start.
        start: u64,
        /// The namespace's first id.
        first: u64,
    },
    /// Ends past the width.
    #[error("its last id {last} does not fit {bits} bits")]
    AboveWidth {
        /// The block's last id.
        last: u64,
        /// The namespace's width.
        bits: u32,
    },
    /// Starts below the end of an earlier block of its class: it would repeat ids.
    #[error(
        "it starts at {start}, below {previous_end}, the end of an earlier block of its class"
    )]
    NotAbove {
        /// The block's start.
        start: u64,
        /// The end of the earlier block.
        previous_end: u64,
    },
}

/// An [`IdSpace`] plus, per residue class, the end of the latest block admitted. Behind a
/// `std::sync::Mutex` held for a few comparisons, never across `.await`.
#[derive(Debug)]
pub struct BlockGate {
    space: IdSpace,
    /// `(residue, end of the latest admitted block of it)`.
    ends: Mutex<Vec<(u64, u64)>>,
}

impl BlockGate {
    /// A gate for `space` that has admitted nothing.
    pub fn new(space: IdSpace) -> Self {
        BlockGate {
            space,
            ends: Mutex::new(Vec::new()),
        }
    }

    /// The namespace's ids.
    pub fn space(&self) -> &IdSpace {
        &self.space
    }

    /// Admits a block reserved concurrently with others (cache off): the shape checks only,
    /// since concurrent reservations may complete in any order.
    pub fn admit_concurrent(&self, block: &Block) -> Result<(), BlockMismatch> {
        self.space.check(block)
    }

    /// Admits `block` if it passes every check of the module docs, and remembers its end. For
    /// blocks reserved one at a time (a refill task).
    pub fn admit(&self, block: &Block) -> Result<(), BlockMismatch> {
        self.space.check(block)?;
        let residue = block.start() % block.step();
        let mut ends = self.ends.lock().unwrap_or_else(|p| p.into_inner());
        match ends.iter_mut().find(|(r, _)| *r == residue) {
            Some((_, end)) if block.start() < *end => Err(BlockMismatch::NotAbove {
                start: block.start(),
                previous_end: *end,
            }),
            Some((_, end)) => {
                *end = block.end();
                Ok(())
            }
            None => {
                ends.push((residue, block.end()));
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use idmint_core::Width;

    fn space(step: u64, residues: Vec<u64>) -> IdSpace {
        IdSpace::new(
            SequenceSpec::new(Width::Bits32, 1, step, 0).unwrap(),
            residues,
        )
    }

    /// Guards against a stale member: a block of a stale spec (step 2) in a step-3 namespace is refused,
    /// although step 2 and step 3 blocks were never compared by the buffer.
    #[test]
    fn a_block_of_another_step_or_class_is_refused() {
        let gate = BlockGate::new(space(3, vec![1, 2]));
        assert!(gate.admit(&Block::new(4, 34, 3).unwrap()).is_ok());
        assert_eq!(
            gate.admit(&Block::new(5, 25, 2).unwrap()),
            Err(BlockMismatch::Step { got: 2, want: 3 })
        );
        assert_eq!(
            gate.admit(&Block::new(3, 33, 3).unwrap()),
            Err(BlockMismatch::Residue {
                got: 0,
                want: vec![1, 2]
            })
        );
    }

    #[test]
    fn a_block_below_the_first_id_or_past_the_width_is_refused() {
        let gate = BlockGate::new(IdSpace::single(
            SequenceSpec::new(Width::Bits32, 10, 1, 0).unwrap(),
        ));
        assert!(matches!(
            gate.admit(&Block::new(5, 20, 1).unwrap()),
            Err(BlockMismatch::BelowFirst { .. })
        ));
        let max = Width::Bits32.max_id();
        assert!(matches!(
            gate.admit(&Block::new(max - 1, max + 2, 1).unwrap()),
            Err(BlockMismatch::AboveWidth { .. })
        ));
    }

    /// A source whose watermark went back (a restored backup under a running node) is caught
    /// at the first repeated block.
    #[test]
    fn a_block_below_an_earlier_one_of_its_class_is_refused() {
        let gate = BlockGate::new(space(2, vec![0, 1]));
        assert!(gate.admit(&Block::new(11, 31, 2).unwrap()).is_ok());
        assert!(
            gate.admit(&Block::new(2, 22, 2).unwrap()).is_ok(),
            "other class"
        );
        assert!(gate.admit(&Block::new(31, 41, 2).unwrap()).is_ok());
        assert_eq!(
            gate.admit(&Block::new(21, 41, 2).unwrap()),
            Err(BlockMismatch::NotAbove {
                start: 21,
                previous_end: 41
            })
        );
    }

    #[test]
    fn contains_knows_every_members_class() {
        let s = space(3, vec![0, 1, 2]);
        assert!(s.contains(3) && s.contains(4) && s.contains(5));
        let single = space(3, vec![]);
        assert!(single.contains(3) && !single.contains(4));
        assert!(!s.contains(0), "below first");
    }
}
