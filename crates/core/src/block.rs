//! Block arithmetic for sequence namespaces.
//!
//! A [`Block`] is a half-open range `[start, end)` walked with a fixed `step`: its ids are
//! `start, start + step, start + 2*step, …` while below `end`. A [`SequenceSpec`] says which ids
//! a namespace may ever hand out: every id `>= first`, `<= width.max_id()`, and congruent to
//! `offset` modulo `step` (Flickr's `auto-increment-offset` / `auto-increment-increment`).
//!
//! Invariants kept here:
//! - arithmetic never wraps: every addition is checked, and running past the width's maximum is
//!   [`BlockError::Exhausted`] (invariant 6: a 32-bit namespace never wraps);
//! - [`SequenceSpec::reserve`] only returns ids of the spec's residue class, all at or above the
//!   watermark it was given, and a new watermark above every id of the block (invariant 1 and 5:
//!   blocks reserved from increasing watermarks are disjoint);
//! - splitting a block yields disjoint sub-blocks whose union is the original.
//!
//! This module does no I/O: recording the watermark durably is the authority's job.

use thiserror::Error;

/// The integer width of a sequence namespace. Ids never exceed [`Width::max_id`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Width {
    /// Ids fit a signed 32-bit column (`INTEGER` in PostgreSQL, `INT` in MySQL): at most 2^31 - 1.
    Bits32,
    /// Ids fit a signed 64-bit column (`BIGINT`, Java `long`): at most 2^63 - 1.
    Bits64,
}

impl Width {
    /// The largest id this width may hold.
    pub const fn max_id(self) -> u64 {
        match self {
            Width::Bits32 => i32::MAX as u64,
            Width::Bits64 => i64::MAX as u64,
        }
    }

    /// The number of bits (32 or 64).
    pub const fn bits(self) -> u32 {
        match self {
            Width::Bits32 => 32,
            Width::Bits64 => 64,
        }
    }

    /// Parses `32` or `64`.
    pub fn from_bits(bits: u32) -> Option<Width> {
        match bits {
            32 => Some(Width::Bits32),
            64 => Some(Width::Bits64),
            _ => None,
        }
    }
}

/// Errors of block arithmetic.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum BlockError {
    /// No id of the namespace's residue class is left below the width's maximum.
    #[error(
        "the {bits}-bit id space is exhausted: no id left at or above {watermark} (maximum {max})"
    )]
    Exhausted {
        /// The width's bit count.
        bits: u32,
        /// The watermark the reservation started from.
        watermark: u64,
        /// The width's maximum id.
        max: u64,
    },
    /// A block of zero ids was asked for.
    #[error("a block must hold at least one id")]
    EmptyRequest,
}

/// Errors constructing a [`SequenceSpec`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SpecError {
    /// `step` was zero.
    #[error("step must be at least 1")]
    ZeroStep,
    /// `offset` was not below `step`.
    #[error(
        "offset {offset} must be below step {step} (ids are those congruent to offset mod step)"
    )]
    OffsetNotBelowStep {
        /// The offset given.
        offset: u64,
        /// The step given.
        step: u64,
    },
    /// `first` is above the width's maximum.
    #[error("first id {first} is above the {bits}-bit maximum {max}")]
    FirstAboveMax {
        /// The first id given.
        first: u64,
        /// The width's bit count.
        bits: u32,
        /// The width's maximum id.
        max: u64,
    },
    /// No id of the residue class exists between `first` and the maximum.
    #[error("no id congruent to {offset} mod {step} lies between {first} and {max}")]
    EmptyClass {
        /// The first id given.
        first: u64,
        /// The step given.
        step: u64,
        /// The offset given.
        offset: u64,
        /// The width's maximum id.
        max: u64,
    },
}

/// Which ids a sequence namespace may hand out. Construct with [`SequenceSpec::new`]; a spec that
/// exists is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SequenceSpec {
    width: Width,
    first: u64,
    step: u64,
    offset: u64,
}

impl SequenceSpec {
    /// A spec of every id `>= first` and `<= width.max_id()` with `id % step == offset`.
    ///
    /// Flickr's two ticket servers with `auto-increment-increment = 2` are `step = 2` with
    /// offsets `1` and `0` (MySQL's `auto-increment-offset` 1 and 2; offset `n` is `0` here).
    pub fn new(width: Width, first: u64, step: u64, offset: u64) -> Result<Self, SpecError> {
        if step == 0 {
            return Err(SpecError::ZeroStep);
        }
        if offset >= step {
            return Err(SpecError::OffsetNotBelowStep { offset, step });
        }
        let max = width.max_id();
        if first > max {
            return Err(SpecError::FirstAboveMax {
                first,
                bits: width.bits(),
                max,
            });
        }
        let spec = SequenceSpec {
            width,
            first,
            step,
            offset,
        };
        match spec.align_up(first) {
            Some(id) if id <= max => Ok(spec),
            _ => Err(SpecError::EmptyClass {
                first,
                step,
                offset,
                max,
            }),
        }
    }

    /// The default spec: 64-bit ids 1, 2, 3, …
    pub fn default_64() -> Self {
        SequenceSpec {
            width: Width::Bits64,
            first: 1,
            step: 1,
            offset: 0,
        }
    }

    /// The width.
    pub fn width(&self) -> Width {
        self.width
    }
    /// The lowest id the namespace may hand out (before alignment to the residue class).
    pub fn first(&self) -> u64 {
        self.first
    }
    /// The distance between consecutive ids.
    pub fn step(&self) -> u64 {
        self.step
    }
    /// The residue every id has modulo `step`.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The initial watermark of a namespace with this spec: nothing below `first` is handed out.
    pub fn initial_watermark(&self) -> u64 {
        self.first
    }

    /// The smallest id of the residue class at or above `x`, or `None` on overflow of `u64`.
    pub fn align_up(&self, x: u64) -> Option<u64> {
        let x = x.max(self.first);
        let rem = x % self.step;
        // offset, rem < step; no intermediate sum may exceed u64 (step can be near 2^64).
        let add = if rem <= self.offset {
            self.offset - rem
        } else {
            self.step - (rem - self.offset)
        };
        x.checked_add(add)
    }

    /// Reserves up to `count` ids at or above `watermark`.
    ///
    /// Returns the block and the new watermark (`block.end()`), which is above every id of the
    /// block. The block is shorter than `count` only when the id space ends first; when not a
    /// single id is left the result is [`BlockError::Exhausted`].
    pub fn reserve(&self, watermark: u64, count: u64) -> Result<Block, BlockError> {
        if count == 0 {
            return Err(BlockError::EmptyRequest);
        }
        let max = self.width.max_id();
        let exhausted = BlockError::Exhausted {
            bits: self.width.bits(),
            watermark,
            max,
        };
        let start = match self.align_up(watermark) {
            Some(s) if s <= max => s,
            _ => return Err(exhausted),
        };
        // Ids available from start to max inclusive.
        let available = (max - start) / self.step + 1;
        let n = count.min(available);
        // last = start + (n-1)*step <= max, so none of this overflows.
        let last = start + (n - 1) * self.step;
        Ok(Block {
            start,
            end: last + 1,
            step: self.step,
        })
    }

    /// Whether `id` is one this spec may ever hand out: at or above `first`, at most the width's
    /// largest id, and of the residue class (`id ≡ offset mod step`).
    pub fn contains(&self, id: u64) -> bool {
        id >= self.first && id <= self.width.max_id() && id % self.step == self.offset
    }

    /// How many ids of this spec lie in `[lo, hi)`.
    pub fn ids_between(&self, lo: u64, hi: u64) -> u64 {
        let hi = hi.min(self.width.max_id().saturating_add(1));
        match self.align_up(lo) {
            Some(s) if s < hi => (hi - 1 - s) / self.step + 1,
            _ => 0,
        }
    }

    /// Total number of ids the namespace can ever hand out.
    pub fn capacity(&self) -> u64 {
        self.ids_between(self.first, u64::MAX)
    }
}

/// A half-open range of ids `[start, end)` walked with `step`. Never empty: `start < end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Block {
    start: u64,
    end: u64,
    step: u64,
}

impl Block {
    /// A block, or `None` when it would be empty or `step` is zero.
    pub fn new(start: u64, end: u64, step: u64) -> Option<Block> {
        (start < end && step > 0).then_some(Block { start, end, step })
    }

    /// The first id.
    pub fn start(&self) -> u64 {
        self.start
    }
    /// One past the last id's range; every id is below it.
    pub fn end(&self) -> u64 {
        self.end
    }
    /// The distance between consecutive ids.
    pub fn step(&self) -> u64 {
        self.step
    }
    /// The last id in the block.
    pub fn last(&self) -> u64 {
        self.start + (self.len() - 1) * self.step
    }
    /// The number of ids (at least 1).
    pub fn len(&self) -> u64 {
        (self.end - 1 - self.start) / self.step + 1
    }
    /// Always false: a block holds at least one id. Present for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        false
    }
    /// Whether `id` is one of the block's ids.
    pub fn contains(&self, id: u64) -> bool {
        id >= self.start && id < self.end && (id - self.start).is_multiple_of(self.step)
    }

    /// Splits off the first `count` ids as a sub-block (same step), returning it and the rest.
    /// With `count >= len()` the whole block is returned and the rest is `None`.
    pub fn split_first(self, count: u64) -> (Block, Option<Block>) {
        if count == 0 {
            // Callers ask for at least one id; treat zero as one rather than return an empty block.
            return self.split_first(1);
        }
        if count >= self.len() {
            return (self, None);
        }
        let next = self.start + count * self.step; // < end, since count < len
        let head = Block {
            start: self.start,
            end: next - self.step + 1,
            step: self.step,
        };
        let tail = Block {
            start: next,
            end: self.end,
            step: self.step,
        };
        (head, Some(tail))
    }

    /// Splits the block into sub-blocks of at most `size` ids each, in increasing order.
    pub fn chunks(self, size: u64) -> impl Iterator<Item = Block> {
        let mut rest = Some(self);
        std::iter::from_fn(move || {
            let block = rest.take()?;
            let (head, tail) = block.split_first(size);
            rest = tail;
            Some(head)
        })
    }

    /// The ids of the block, in increasing order.
    pub fn ids(self) -> impl Iterator<Item = u64> {
        let step = self.step;
        (0..self.len()).map(move |i| self.start + i * step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_respects_residue_class_and_watermark() {
        let spec = SequenceSpec::new(Width::Bits64, 1, 2, 1).unwrap();
        let b = spec.reserve(1, 3).unwrap();
        assert_eq!(b.ids().collect::<Vec<_>>(), vec![1, 3, 5]);
        let b2 = spec.reserve(b.end(), 2).unwrap();
        assert_eq!(b2.ids().collect::<Vec<_>>(), vec![7, 9]);
        let even = SequenceSpec::new(Width::Bits64, 1, 2, 0).unwrap();
        assert_eq!(
            even.reserve(1, 2).unwrap().ids().collect::<Vec<_>>(),
            vec![2, 4]
        );
    }

    #[test]
    fn contains_is_every_id_reserve_can_return() {
        let spec = SequenceSpec::new(Width::Bits32, 10, 3, 2).unwrap();
        let b = spec.reserve(0, 5).unwrap();
        assert!(b.ids().all(|id| spec.contains(id)));
        for id in [0, 2, 8, 9, 10, 12, 13, i32::MAX as u64 + 2] {
            assert!(!spec.contains(id), "{id} is not of the spec");
        }
        assert!(spec.contains(11) && spec.contains(14));
    }

    #[test]
    fn bits32_never_wraps() {
        let spec = SequenceSpec::new(Width::Bits32, 1, 1, 0).unwrap();
        let max = i32::MAX as u64;
        let b = spec.reserve(max - 2, 10).unwrap();
        assert_eq!((b.start(), b.last(), b.len()), (max - 2, max, 3));
        assert_eq!(b.end(), max + 1);
        assert!(matches!(
            spec.reserve(b.end(), 1),
            Err(BlockError::Exhausted { bits: 32, .. })
        ));
    }

    #[test]
    fn bits64_edge_has_no_overflow() {
        let spec = SequenceSpec::new(Width::Bits64, 1, 7, 3).unwrap();
        let max = i64::MAX as u64;
        let b = spec.reserve(max - 20, 100).unwrap();
        assert!(b.last() <= max);
        assert!(b.ids().all(|id| id % 7 == 3));
        assert!(spec.reserve(b.end(), 1).is_err());
        assert!(spec.reserve(u64::MAX, 1).is_err());
    }

    #[test]
    fn invalid_specs_are_rejected() {
        assert_eq!(
            SequenceSpec::new(Width::Bits64, 1, 0, 0),
            Err(SpecError::ZeroStep)
        );
        assert!(matches!(
            SequenceSpec::new(Width::Bits64, 1, 2, 2),
            Err(SpecError::OffsetNotBelowStep { .. })
        ));
        assert!(matches!(
            SequenceSpec::new(Width::Bits32, 1 << 31, 1, 0),
            Err(SpecError::FirstAboveMax { .. })
        ));
        assert!(matches!(
            SequenceSpec::new(Width::Bits32, i32::MAX as u64, 4, 0),
            Err(SpecError::EmptyClass { .. })
        ));
    }

    #[test]
    fn split_and_chunks_partition_the_block() {
        let b = Block::new(10, 41, 3).unwrap(); // 10,13,...,40 => 11 ids
        assert_eq!(b.len(), 11);
        let (h, t) = b.split_first(4);
        assert_eq!(h.ids().collect::<Vec<_>>(), vec![10, 13, 16, 19]);
        assert_eq!(t.unwrap().start(), 22);
        let all: Vec<u64> = b.chunks(3).flat_map(|c| c.ids()).collect();
        assert_eq!(all, b.ids().collect::<Vec<_>>());
    }

    /// Guards against `align_up` overflowing for steps above 2^63 (`offset + step - rem`).
    #[test]
    fn huge_steps_do_not_overflow() {
        let spec = SequenceSpec::new(Width::Bits64, 0, u64::MAX, u64::MAX - 1).unwrap_err();
        assert!(matches!(spec, SpecError::EmptyClass { .. }));
        let spec = SequenceSpec::new(Width::Bits64, 0, u64::MAX - 5, 3).unwrap();
        assert_eq!(spec.align_up(4), Some(u64::MAX - 2));
        let b = spec.reserve(0, 10).unwrap();
        assert_eq!((b.start(), b.len()), (3, 1));
        assert!(spec.reserve(b.end(), 1).is_err());
    }

    #[test]
    fn capacity_counts_class_members() {
        let spec = SequenceSpec::new(Width::Bits32, 1, 1, 0).unwrap();
        assert_eq!(spec.capacity(), i32::MAX as u64);
        let odd = SequenceSpec::new(Width::Bits32, 1, 2, 1).unwrap();
        assert_eq!(odd.capacity(), (i32::MAX as u64).div_ceil(2));
    }
}
