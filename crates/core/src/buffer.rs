//! The leased-block buffer: HubSpot's per-tier cache of id blocks, as a state machine.
//!
//! A [`Buffer`] holds the current block and blocks fetched ahead. It hands out ids in increasing
//! order and decides when to ask its source (an authority, an upstream node) for more and how
//! many: enough for `buffer_seconds` of demand, demand being an exponentially weighted moving
//! average of ids served per second (HubSpot's QPS-based sizing), bounded by a minimum and a
//! maximum block size. The caller does the I/O and reports back.
//!
//! Invariants:
//! - ids leave the buffer each once, in strictly increasing order within a residue class
//!   (`id mod step`); with one source (one class) that is strictly increasing, full stop. Several
//!   sources owning different classes (Flickr's odd/even servers) interleave, as they do there;
//! - a block is accepted only if it starts above every id the buffer has held of its residue
//!   class ([`BufferError::OutOfOrder`] otherwise), so a misbehaving source cannot make it
//!   repeat; blocks of different classes of one step cannot share an id;
//! - at most one refill is in flight at a time;
//! - nothing below the floor ([`Buffer::raise_floor`]: an operator's rebase) is ever buffered
//!   again, by any path: a refill's block, a failed request's put-back, a lower tier's tail
//!   ([`Buffer::take_back_tail`]) all compare with it, and what falls below is burned;
//! - every id that entered the buffer is either served, handed back as the unused tail, or
//!   counted as burned: `received == served + buffered + burned + given_back`.
//!
//! Putting ids back. A request that takes ids and then fails (its source is down, it is
//! dropped) must not lose them. It takes through a [`Taken`] record ([`Buffer::take_for`],
//! [`Buffer::take_block_for`]) and, on failure, hands the record to [`Buffer::put_back`]. The
//! buffer restores the ids to its front, exactly as they were before the request's first take,
//! **only if nothing else took from (or emptied) the buffer since that first take**: every
//! operation that removes ids from the front bumps a generation counter, and a record remembers
//! the generation after each of its own takes. Otherwise the ids are counted as burned (never
//! served again). Either way they leave `served`. Guarantee: the ids of successful takes, in
//! the order they were taken, are exactly what a buffer that never saw the failed request would
//! have handed out, so they stay strictly increasing per residue class across requests, and an
//! id put back comes out again before anything above it. Blocks pushed in the meantime only go
//! to the back, above every id held, so they do not interfere. Refused put-backs are rare (two
//! requests draining an almost empty buffer at once while the source fails) and cost id
//! space, never uniqueness or order.
//!
//! The hot path ([`Buffer::next_id`], [`Buffer::take`]) reads no clock; demand is folded into
//! the average when the caller calls [`Buffer::observe`] (the node does on every refill check).
//! [`SharedBlock`] is the lock-free variant for many threads carving chunks from one block.

use crate::block::Block;
use crate::sync::{AtomicU64, Ordering};
use std::collections::VecDeque;
use std::time::Duration;
use thiserror::Error;

/// Shortest interval whose rate counts as the recent demand (shorter ones are too noisy: one
/// large batch request would look like a flood).
const RECENT_MIN_NANOS: u64 = 10_000_000;

/// How a buffer sizes its refills.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sizing {
    /// Hold `buffer_seconds` of average demand, clamped to `[min_block, max_block]`.
    Adaptive {
        /// Seconds of demand one refill should cover.
        buffer_seconds: f64,
        /// Smallest block asked for.
        min_block: u64,
        /// Largest block asked for.
        max_block: u64,
    },
    /// Always ask for this many ids.
    Fixed(u64),
}

/// Buffer settings, validated by [`BufferPolicy::new`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BufferConfig {
    /// Block sizing.
    pub sizing: Sizing,
    /// Refill when fewer than this fraction of a block remain buffered (0 < f <= 1).
    pub low_water: f64,
    /// Time constant of the demand average: a change in demand is 63% absorbed after this long.
    pub demand_window: Duration,
}

impl Default for BufferConfig {
    /// Adaptive, 10 seconds of demand, blocks of 1,000 to 1,000,000 ids, refill below half,
    /// demand averaged over 5 seconds.
    fn default() -> Self {
        BufferConfig {
            sizing: Sizing::Adaptive {
                buffer_seconds: 10.0,
                min_block: 1_000,
                max_block: 1_000_000,
            },
            low_water: 0.5,
            demand_window: Duration::from_secs(5),
        }
    }
}

/// Why a buffer configuration is invalid.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum BufferConfigError {
    /// A block size of zero.
    #[error("block sizes must be at least 1")]
    ZeroBlock,
    /// `min_block > max_block`.
    #[error("min_block {min} is above max_block {max}")]
    MinAboveMax {
        /// min_block.
        min: u64,
        /// max_block.
        max: u64,
    },
    /// `buffer_seconds` not a positive finite number.
    #[error("buffer_seconds must be a positive number, got {0}")]
    BadSeconds(f64),
    /// `low_water` outside (0, 1].
    #[error("low_water must be in (0, 1], got {0}")]
    BadLowWater(f64),
    /// A zero demand window.
    #[error("demand_window must be above zero")]
    ZeroWindow,
}

/// A validated [`BufferConfig`]; the default is [`BufferConfig::default`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BufferPolicy(BufferConfig);

impl BufferPolicy {
    /// Validates `config`.
    pub fn new(config: BufferConfig) -> Result<Self, BufferConfigError> {
        match config.sizing {
            Sizing::Fixed(0) => return Err(BufferConfigError::ZeroBlock),
            Sizing::Fixed(_) => {}
            Sizing::Adaptive {
                buffer_seconds,
                min_block,
                max_block,
            } => {
                if min_block == 0 {
                    return Err(BufferConfigError::ZeroBlock);
                }
                if min_block > max_block {
                    return Err(BufferConfigError::MinAboveMax {
                        min: min_block,
                        max: max_block,
                    });
                }
                if !(buffer_seconds.is_finite() && buffer_seconds > 0.0) {
                    return Err(BufferConfigError::BadSeconds(buffer_seconds));
                }
            }
        }
        if !(config.low_water > 0.0 && config.low_water <= 1.0) {
            return Err(BufferConfigError::BadLowWater(config.low_water));
        }
        if config.demand_window.is_zero() {
            return Err(BufferConfigError::ZeroWindow);
        }
        Ok(BufferPolicy(config))
    }

    /// The settings.
    pub fn config(&self) -> &BufferConfig {
        &self.0
    }
}

/// A block the source handed over does not fit after what the buffer holds.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum BufferError {
    /// The block starts at or below an id the buffer already held.
    #[error("block starting at {start} is not above the highest id already held ({highest}); refusing it so no id repeats")]
    OutOfOrder {
        /// The block's start.
        start: u64,
        /// The highest id held so far.
        highest: u64,
    },
}

/// Counters of a buffer's life, for status pages and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BufferStats {
    /// Ids received from the source.
    pub received: u64,
    /// Ids handed out (taken and not put back).
    pub served: u64,
    /// Ids abandoned (lost in a crash of the holder, not returnable at shutdown, or taken by a
    /// request that failed when they could not be put back in front).
    pub burned: u64,
    /// Ids handed back to the source at shutdown.
    pub given_back: u64,
    /// Refills completed.
    pub refills: u64,
}

/// The buffer state machine. See the module docs.
#[derive(Debug)]
pub struct Buffer {
    policy: BufferPolicy,
    /// Next id of the current block, and the current block's end and step.
    cursor: u64,
    end: u64,
    step: u64,
    /// Blocks fetched ahead, in increasing order.
    ahead: VecDeque<Block>,
    buffered: u64,
    /// Per residue class `(step, start % step)`, the highest id ever held (to refuse blocks that
    /// do not come after it). One entry per source; a handful at most.
    highest: Vec<(u64, u64, u64)>,
    refill_in_flight: bool,
    /// No id below it is ever buffered again ([`Buffer::raise_floor`]): what every path that
    /// puts ids into the buffer checks (a refill, a failed request's put-back, a lower tier's
    /// tail).
    floor: u64,
    stats: BufferStats,
    /// Bumped by every operation that removes ids from the front or puts them back: a
    /// [`Taken`] may be put back only if it saw every bump since its first take.
    generation: u64,
    // Demand average.
    rate_per_sec: f64,
    /// Demand over the latest observed interval of at least [`RECENT_MIN_NANOS`]: lets sizing
    /// react within one interval when load returns after an idle spell, which the average
    /// (decayed while idle) would take seconds to notice.
    recent_rate: f64,
    served_at_last_observe: u64,
    last_observe_nanos: Option<u64>,
}

impl Buffer {
    /// An empty buffer.
    pub fn new(policy: BufferPolicy) -> Self {
        let rate_per_sec = match policy.0.sizing {
            // Start as if demand filled a minimum block per buffer period.
            Sizing::Adaptive {
                buffer_seconds,
                min_block,
                ..
            } => min_block as f64 / buffer_seconds,
            Sizing::Fixed(_) => 0.0,
        };
        Buffer {
            policy,
            cursor: 0,
            end: 0,
            step: 1,
            ahead: VecDeque::new(),
            buffered: 0,
            highest: Vec::new(),
            refill_in_flight: false,
            floor: 0,
            stats: BufferStats::default(),
            generation: 0,
            rate_per_sec,
            recent_rate: 0.0,
            served_at_last_observe: 0,
            last_observe_nanos: None,
        }
    }

    /// The policy.
    pub fn policy(&self) -> &BufferPolicy {
        &self.policy
    }

    /// Ids held and not yet handed out.
    pub fn buffered(&self) -> u64 {
        self.buffered
    }

    /// The next id [`Buffer::next_id`] would hand out, if any: the lowest held of its residue
    /// class, not necessarily the lowest held (blocks of several classes queue in arrival
    /// order).
    pub fn lowest(&self) -> Option<u64> {
        if self.cursor < self.end {
            Some(self.cursor)
        } else {
            self.ahead.front().map(Block::start)
        }
    }

    /// Lifetime counters.
    pub fn stats(&self) -> BufferStats {
        self.stats
    }

    /// The average demand, ids per second.
    pub fn demand_per_sec(&self) -> f64 {
        self.rate_per_sec
    }

    /// The demand refills are sized for: the average, or the latest interval's rate when that is
    /// higher (a burst after an idle spell).
    pub fn sizing_demand_per_sec(&self) -> f64 {
        self.rate_per_sec.max(self.recent_rate)
    }

    /// Whether a refill is in flight.
    pub fn refill_in_flight(&self) -> bool {
        self.refill_in_flight
    }

    /// The block size the next refill asks for.
    pub fn target_block(&self) -> u64 {
        match self.policy.0.sizing {
            Sizing::Fixed(n) => n,
            Sizing::Adaptive {
                buffer_seconds,
                min_block,
                max_block,
            } => {
                let want = (self.sizing_demand_per_sec() * buffer_seconds).ceil();
                if want >= max_block as f64 {
                    max_block
                } else {
                    (want as u64).clamp(min_block, max_block)
                }
            }
        }
    }

    /// The level below which the buffer wants a refill.
    pub fn low_water_mark(&self) -> u64 {
        ((self.target_block() as f64 * self.policy.0.low_water).ceil() as u64).max(1)
    }

    /// Whether the buffer is below its low-water mark with no refill in flight. Cheap.
    #[inline]
    pub fn wants_refill(&self) -> bool {
        !self.refill_in_flight && self.buffered < self.low_water_mark()
    }

    /// Folds the ids served since the last call into the demand average. `now_nanos` is any
    /// monotonic reading; calls closer together than a millisecond are ignored.
    pub fn observe(&mut self, now_nanos: u64) {
        let Some(last) = self.last_observe_nanos else {
            self.last_observe_nanos = Some(now_nanos);
            self.served_at_last_observe = self.stats.served;
            return;
        };
        let dt_nanos = now_nanos.saturating_sub(last);
        if dt_nanos < 1_000_000 {
            return;
        }
        let dt = dt_nanos as f64 / 1e9;
        // A put-back lowers `served`; ids taken and put back within the interval do not count.
        let served = self
            .stats
            .served
            .saturating_sub(self.served_at_last_observe) as f64;
        let rate = served / dt;
        let alpha = 1.0 - (-dt / self.policy.0.demand_window.as_secs_f64()).exp();
        self.rate_per_sec += alpha * (rate - self.rate_per_sec);
        if dt_nanos >= RECENT_MIN_NANOS {
            self.recent_rate = rate;
        }
        self.last_observe_nanos = Some(now_nanos);
        self.served_at_last_observe = self.stats.served;
    }

    /// If a refill is wanted, marks one in flight and returns how many ids to ask for. The caller
    /// must answer with [`Buffer::refill_done`] or [`Buffer::refill_failed`].
    pub fn start_refill(&mut self, now_nanos: u64) -> Option<u64> {
        self.observe(now_nanos);
        if !self.wants_refill() {
            return None;
        }
        self.refill_in_flight = true;
        Some(self.target_block())
    }

    /// Marks a refill in flight regardless of the level (for a request that found the buffer
    /// empty) and returns the count to ask for; `None` if one is already in flight.
    pub fn force_refill(&mut self, now_nanos: u64) -> Option<u64> {
        self.observe(now_nanos);
        if self.refill_in_flight {
            return None;
        }
        self.refill_in_flight = true;
        Some(self.target_block())
    }

    /// The refill in flight failed; a later check may start another.
    pub fn refill_failed(&mut self) {
        self.refill_in_flight = false;
    }

    /// The refill in flight brought `block`. Accepted only if it starts above every id held so
    /// far; a block that continues the newest one exactly is merged with it.
    pub fn refill_done(&mut self, block: Block) -> Result<(), BufferError> {
        self.refill_in_flight = false;
        self.push(block)
    }

    /// The floor: no id below it is ever buffered.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Raises the floor to `to` (never lowers it): nothing below it will be buffered again, by
    /// any path. If the buffer holds an id below `to`, everything buffered is burned (its
    /// blocks were all granted before the floor moved, so none is above it). Every held block
    /// is compared, not only the front one: blocks of several residue classes (one per multi
    /// member) are queued in arrival order, so a block far below the floor can wait behind one
    /// above it. Returns the ids burned now.
    pub fn raise_floor(&mut self, to: u64) -> u64 {
        self.floor = self.floor.max(to);
        let current_below = self.cursor < self.end && self.cursor < self.floor;
        let ahead_below = self.ahead.iter().any(|b| b.start() < self.floor);
        if current_below || ahead_below {
            self.abandon()
        } else {
            0
        }
    }

    /// Adds a block (outside the refill protocol, e.g. at start-up). Same rule as
    /// [`Buffer::refill_done`]; a block starting below the floor is received and burned whole.
    pub fn push(&mut self, block: Block) -> Result<(), BufferError> {
        let class = (block.step(), block.start() % block.step());
        match self
            .highest
            .iter_mut()
            .find(|(step, residue, _)| (*step, *residue) == class)
        {
            Some((_, _, highest)) if block.start() <= *highest => {
                return Err(BufferError::OutOfOrder {
                    start: block.start(),
                    highest: *highest,
                });
            }
            Some((_, _, highest)) => *highest = block.last(),
            None => self.highest.push((class.0, class.1, block.last())),
        }
        self.stats.received += block.len();
        self.stats.refills += 1;
        if block.start() < self.floor {
            self.stats.burned += block.len();
            return Ok(());
        }
        self.buffered += block.len();
        // Merge with the newest block when it continues it exactly.
        let current_continues = self.cursor < self.end
            && self.step == block.step()
            && self.end_last() + self.step == block.start();
        let merged = match self.ahead.back_mut() {
            Some(back)
                if back.step() == block.step() && back.last() + back.step() == block.start() =>
            {
                if let Some(joined) = Block::new(back.start(), block.end(), block.step()) {
                    *back = joined;
                    true
                } else {
                    false
                }
            }
            Some(_) => false,
            None if current_continues => {
                self.end = block.end();
                true
            }
            None => false,
        };
        if !merged {
            if self.cursor >= self.end && self.ahead.is_empty() {
                self.load(block);
            } else {
                self.ahead.push_back(block);
            }
        }
        Ok(())
    }

    /// Last id of the current block (valid only while it is non-empty).
    fn end_last(&self) -> u64 {
        self.cursor + (self.end - 1 - self.cursor) / self.step * self.step
    }

    fn load(&mut self, block: Block) {
        self.cursor = block.start();
        self.end = block.end();
        self.step = block.step();
    }

    #[inline]
    fn advance(&mut self) -> bool {
        match self.ahead.pop_front() {
            Some(b) => {
                self.load(b);
                true
            }
            None => false,
        }
    }

    /// The next id, or `None` when the buffer is empty.
    #[inline]
    pub fn next_id(&mut self) -> Option<u64> {
        if self.cursor >= self.end && !self.advance() {
            return None;
        }
        let id = self.cursor;
        self.cursor = self.cursor.saturating_add(self.step);
        self.buffered -= 1;
        self.stats.served += 1;
        self.generation += 1;
        Some(id)
    }

    /// Appends up to `max` ids to `out`, in increasing order; returns how many.
    pub fn take(&mut self, max: u64, out: &mut Vec<u64>) -> u64 {
        let mut taken = 0;
        while taken < max {
            let Some(block) = self.take_block(max - taken) else {
                break;
            };
            out.extend(block.ids());
            taken += block.len();
        }
        taken
    }

    /// Up to `max` consecutive ids of the current block as a sub-block (for a lower tier), or
    /// `None` when empty.
    pub fn take_block(&mut self, max: u64) -> Option<Block> {
        if max == 0 {
            return None;
        }
        if self.cursor >= self.end && !self.advance() {
            return None;
        }
        let current = Block::new(self.cursor, self.end, self.step)?;
        let (head, rest) = current.split_first(max);
        match rest {
            Some(rest) => self.cursor = rest.start(),
            None => self.cursor = self.end,
        }
        self.buffered -= head.len();
        self.stats.served += head.len();
        self.generation += 1;
        Some(head)
    }

    /// Like [`Buffer::take`], recording what was taken in `taken` (so the request can
    /// [`Buffer::put_back`] it if it fails) instead of copying ids out; returns how many.
    pub fn take_for(&mut self, taken: &mut Taken, max: u64) -> u64 {
        let mut n = 0;
        while n < max {
            let Some(block) = self.take_block_for(taken, max - n) else {
                break;
            };
            n += block.len();
        }
        n
    }

    /// Like [`Buffer::take_block`], recording the block in `taken`.
    pub fn take_block_for(&mut self, taken: &mut Taken, max: u64) -> Option<Block> {
        let before = self.generation;
        let block = self.take_block(max)?;
        if taken.at.is_some_and(|at| at != before) {
            // Someone else took between two of this request's takes.
            taken.interleaved = true;
        }
        taken.at = Some(self.generation);
        taken.len += block.len();
        taken.push(block);
        Some(block)
    }

    /// Exactly `count` consecutive ids as one block (Redis's `INCRBY`: the answer `v` stands
    /// for `v-count+1 ..= v`), recorded in `taken`.
    ///
    /// They come from the current block if it holds at least `count` ids. A current block
    /// holding fewer is burned first, at most `burn_budget` of them per request (each burn
    /// decrements it): its ids are never handed out, because serving them after the ids of a
    /// later block would break the increasing order of one client's ids. Burned ids are counted
    /// as burned, never as served. `None` when the buffer runs empty or the budget is spent
    /// (`*burn_budget == 0` tells the two apart).
    pub fn take_consecutive_for(
        &mut self,
        taken: &mut Taken,
        count: u64,
        burn_budget: &mut u32,
    ) -> Option<Block> {
        loop {
            if count == 0 || (self.cursor >= self.end && !self.advance()) {
                return None;
            }
            let left = Block::new(self.cursor, self.end, self.step).map_or(0, |b| b.len());
            if left >= count {
                return self.take_block_for(taken, count);
            }
            if *burn_budget == 0 {
                return None;
            }
            *burn_budget -= 1;
            self.cursor = self.end;
            self.buffered -= left;
            self.stats.burned += left;
            self.generation += 1;
        }
    }

    /// Gives back what a failed request took: back to the front of the buffer, in the same
    /// order, if nothing else took from the buffer since the request's first take; otherwise
    /// counted as burned. Either way the ids no longer count as served. `taken` must come from
    /// this buffer's [`Buffer::take_for`]/[`Buffer::take_block_for`].
    pub fn put_back(&mut self, taken: Taken) -> PutBack {
        let n = taken.len;
        if n == 0 {
            return PutBack::Restored(0);
        }
        self.stats.served -= n;
        // Every block, not the first id: a request may span blocks of several residue classes,
        // taken in arrival order, so a later block can start below the first.
        let below_floor = taken.blocks().iter().any(|b| b.start() < self.floor);
        #[cfg(feature = "planted")]
        let below_floor = below_floor && !crate::planted::on(crate::planted::PUTBACK_BELOW_FLOOR);
        if taken.interleaved || taken.at != Some(self.generation) || below_floor {
            #[cfg(feature = "planted")]
            if crate::planted::on(crate::planted::BURN_UNCOUNTED) {
                return PutBack::Burned(n);
            }
            self.stats.burned += n;
            return PutBack::Burned(n);
        }
        self.generation += 1;
        for &block in taken.blocks().iter().rev() {
            self.push_front(block);
        }
        self.buffered += n;
        PutBack::Restored(n)
    }

    /// Burns what a failed request took, never to be served (the buffer was closed since):
    /// the ids leave `served` and count as burned. Returns how many.
    pub fn burn_taken(&mut self, taken: Taken) -> u64 {
        let n = taken.len;
        self.stats.served -= n;
        self.stats.burned += n;
        n
    }

    /// Takes back `tail`, the unused end of the one block a lower tier took through `lease`
    /// ([`Buffer::take_block_for`] on a fresh [`Taken`]): the give-back of a tier below.
    ///
    /// `None`, changing nothing, unless `tail` is a tail of that block: same step, same end,
    /// starting on one of the block's ids. Otherwise, as [`Buffer::put_back`] does for a whole
    /// request: back in front of the buffer only if nothing was taken from it since the lease
    /// (so no id above the tail has left, and the tail's ids come out next, in order); else
    /// counted as burned. Either way the tail's ids no longer count as served. The caller must
    /// accept each lease's tail at most once (a second put-back would serve the ids twice).
    pub fn take_back_tail(&mut self, lease: &Taken, tail: Block) -> Option<PutBack> {
        let [block] = lease.blocks() else {
            return None;
        };
        let fits = tail.step() == block.step()
            && tail.end() == block.end()
            && tail.start() >= block.start()
            && (tail.start() - block.start()).is_multiple_of(block.step());
        if !fits {
            return None;
        }
        let n = tail.len();
        self.stats.served = self.stats.served.saturating_sub(n);
        let below_floor = tail.start() < self.floor;
        let taken_since = lease.interleaved || lease.at != Some(self.generation);
        #[cfg(feature = "planted")]
        let below_floor = below_floor && !crate::planted::on(crate::planted::TAIL_BELOW_FLOOR);
        #[cfg(feature = "planted")]
        let taken_since = taken_since && !crate::planted::on(crate::planted::TAIL_AFTER_TAKE);
        if taken_since || below_floor {
            self.stats.burned += n;
            return Some(PutBack::Burned(n));
        }
        self.generation += 1;
        self.push_front(tail);
        self.buffered += n;
        Some(PutBack::Restored(n))
    }

    /// Puts `block`, whose ids all come just before the buffer's next id, in front.
    fn push_front(&mut self, block: Block) {
        let current = Block::new(self.cursor, self.end, self.step);
        match current {
            Some(_)
                if block.step() == self.step
                    && block.last().checked_add(self.step) == Some(self.cursor) =>
            {
                // It was split off the current block: rejoin.
                self.cursor = block.start();
            }
            Some(current) => {
                self.ahead.push_front(current);
                self.load(block);
            }
            None => self.load(block),
        }
    }

    /// Empties the buffer for a graceful shutdown. Returns the unused ids of the newest block
    /// (to hand back to the source by compare-and-swap); older unused blocks are counted as
    /// burned. Call [`Buffer::record_given_back`] or [`Buffer::record_burned`] with the outcome.
    pub fn take_unused_tail(&mut self) -> Option<Block> {
        let mut unused = self.take_unused();
        let newest = unused.pop()?;
        self.stats.burned += unused.iter().map(Block::len).sum::<u64>();
        Some(newest)
    }

    /// Empties the buffer for a graceful shutdown and returns every unused block, in
    /// increasing order (the current block's remainder first, the newest block last), counting
    /// none of them: call [`Buffer::record_given_back`] or [`Buffer::record_burned`] for those
    /// that went back or were lost, and nothing for those the caller keeps to serve later.
    pub fn take_unused(&mut self) -> Vec<Block> {
        let mut unused = Vec::with_capacity(self.ahead.len() + 1);
        unused.extend(Block::new(self.cursor, self.end, self.step));
        unused.extend(self.ahead.drain(..));
        self.generation += 1;
        self.cursor = self.end;
        self.buffered = 0;
        unused
    }

    /// The tail from [`Buffer::take_unused_tail`] was handed back.
    pub fn record_given_back(&mut self, ids: u64) {
        self.stats.given_back += ids;
    }

    /// Ids that were neither served nor handed back.
    pub fn record_burned(&mut self, ids: u64) {
        self.stats.burned += ids;
    }

    /// Drops everything held (ownership lost): every buffered id counts as burned and none may be
    /// served again. Returns how many.
    pub fn abandon(&mut self) -> u64 {
        let n = self.buffered;
        self.stats.burned += n;
        self.generation += 1;
        self.ahead.clear();
        self.cursor = self.end;
        self.buffered = 0;
        n
    }
}

/// What one request took from a [`Buffer`] ([`Buffer::take_for`], [`Buffer::take_block_for`]),
/// kept so that the request can [`Buffer::put_back`] it if it fails. Dropping it keeps the ids
/// served.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taken {
    /// The only block taken, held inline: nearly every request takes one block, and this
    /// spares it an allocation. `None` once a second block moves both into `more`.
    one: Option<Block>,
    /// Every block taken, once there are two or more; empty before.
    more: Vec<Block>,
    len: u64,
    /// The buffer's generation right after this request's latest take.
    at: Option<u64>,
    /// Set once another operation took from the buffer between two of this request's takes.
    interleaved: bool,
}

impl Taken {
    /// Nothing taken yet.
    pub fn new() -> Self {
        Taken::default()
    }

    /// The blocks taken, in the order taken (increasing within a residue class).
    pub fn blocks(&self) -> &[Block] {
        match &self.one {
            Some(block) => std::slice::from_ref(block),
            None => &self.more,
        }
    }

    /// The ids taken, in the order taken.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.blocks().iter().flat_map(|b| b.ids())
    }

    fn push(&mut self, block: Block) {
        if let Some(first) = self.one.take() {
            self.more.extend([first, block]);
        } else if self.more.is_empty() {
            self.one = Some(block);
        } else {
            self.more.push(block);
        }
    }

    /// How many ids were taken.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was taken.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `prev` and `next` as one take, when `next` took the ids right after `prev`'s from the
    /// same buffer with nothing taken in between: one block, each a single contiguous block of
    /// one step. A lower tier that holds both leases may then hand back a tail starting in
    /// either ([`Buffer::take_back_tail`]). `None` otherwise.
    pub fn joined(prev: &Taken, next: &Taken) -> Option<Taken> {
        let ([a], [b]) = (prev.blocks(), next.blocks()) else {
            return None;
        };
        let adjacent = a.step() == b.step() && a.last().checked_add(a.step()) == Some(b.start());
        let in_a_row = prev.at.and_then(|at| at.checked_add(1)) == next.at;
        if !adjacent || !in_a_row || prev.interleaved || next.interleaved {
            return None;
        }
        Some(Taken {
            one: Some(Block::new(a.start(), b.end(), a.step())?),
            more: Vec::new(),
            len: prev.len + next.len,
            at: next.at,
            interleaved: false,
        })
    }
}

/// What [`Buffer::put_back`] did with a failed request's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutBack {
    /// This many ids are back in front of the buffer and will be served next.
    Restored(u64),
    /// This many ids could not go back (something was taken after them) and count as burned.
    Burned(u64),
}

/// One block shared by many threads, carved into chunks without a lock: each
/// [`SharedBlock::take`] is one `fetch_add`. Chunks are disjoint and each lies in the block.
#[derive(Debug)]
pub struct SharedBlock {
    next: AtomicU64,
    end: u64,
    step: u64,
}

impl SharedBlock {
    /// Shares `block`.
    pub fn new(block: Block) -> Self {
        SharedBlock {
            next: AtomicU64::new(block.start()),
            end: block.end(),
            step: block.step(),
        }
    }

    /// Up to `count` ids (at least 1) as a sub-block, or `None` when the block is used up.
    pub fn take(&self, count: u64) -> Option<Block> {
        let span = count.max(1).saturating_mul(self.step);
        // Stop advancing once past the end, so the counter cannot wrap however often it is called.
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            if cur >= self.end {
                return None;
            }
            let next = cur.saturating_add(span).min(self.end);
            match self
                .next
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Block::new(cur, next, self.step),
                Err(actual) => cur = actual,
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::block::{SequenceSpec, Width};
    use proptest::prelude::*;

    fn fixed(n: u64) -> BufferPolicy {
        BufferPolicy::new(BufferConfig {
            sizing: Sizing::Fixed(n),
            ..BufferConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn serves_in_order_across_blocks_and_refuses_old_blocks() {
        let mut b = Buffer::new(fixed(4));
        b.push(Block::new(10, 13, 1).unwrap()).unwrap();
        b.push(Block::new(20, 22, 1).unwrap()).unwrap();
        let mut got = vec![];
        while let Some(id) = b.next_id() {
            got.push(id);
        }
        assert_eq!(got, vec![10, 11, 12, 20, 21]);
        assert_eq!(
            b.push(Block::new(21, 30, 1).unwrap()),
            Err(BufferError::OutOfOrder {
                start: 21,
                highest: 21
            })
        );
        assert_eq!(b.stats().served, 5);
    }

    #[test]
    fn consecutive_takes_burn_short_remainders_and_count_them_as_burned() {
        let mut b = Buffer::new(fixed(4));
        b.push(Block::new(10, 13, 1).unwrap()).unwrap(); // 10, 11, 12
        b.push(Block::new(20, 30, 1).unwrap()).unwrap(); // 20..29
        b.push(Block::new(40, 42, 1).unwrap()).unwrap(); // 40, 41
        assert_eq!(b.next_id(), Some(10));

        // 11, 12 are too few for 5: burned; 20..24 taken.
        let mut taken = Taken::new();
        let mut budget = 4;
        let block = b.take_consecutive_for(&mut taken, 5, &mut budget).unwrap();
        assert_eq!((block.start(), block.end()), (20, 25));
        assert_eq!(budget, 3);
        assert_eq!(taken.len(), 5);
        assert_eq!(b.buffered(), 5 + 2);
        let stats = b.stats();
        assert_eq!((stats.served, stats.burned), (1 + 5, 2));

        // 25..29 hold exactly 5: nothing burned.
        let mut budget = 4;
        let block = b
            .take_consecutive_for(&mut Taken::new(), 5, &mut budget)
            .unwrap();
        assert_eq!((block.start(), block.end(), budget), (25, 30, 4));

        // A budget of one burns 40, 41 and stops with the buffer empty; a spent budget burns
        // nothing.
        b.push(Block::new(50, 52, 1).unwrap()).unwrap();
        let mut budget = 0;
        assert_eq!(
            b.take_consecutive_for(&mut Taken::new(), 3, &mut budget),
            None
        );
        assert_eq!(b.buffered(), 4);
        let mut budget = 1;
        assert_eq!(
            b.take_consecutive_for(&mut Taken::new(), 3, &mut budget),
            None
        );
        assert_eq!((budget, b.buffered()), (0, 2));
        let mut budget = 1;
        assert_eq!(
            b.take_consecutive_for(&mut Taken::new(), 3, &mut budget),
            None
        );
        assert_eq!((budget, b.buffered()), (0, 0));
        let stats = b.stats();
        assert_eq!(
            (stats.received, stats.served, stats.burned),
            (3 + 10 + 2 + 2, 11, 2 + 2 + 2)
        );
        assert_eq!(b.next_id(), None);
    }

    #[test]
    fn sources_of_different_residue_classes_interleave_but_each_only_moves_up() {
        let mut b = Buffer::new(fixed(4));
        b.push(Block::new(1001, 1006, 2).unwrap()).unwrap(); // odd server: 1001..1005
        b.push(Block::new(10, 15, 2).unwrap()).unwrap(); // even server, far behind: 10..14
        b.push(Block::new(1007, 1010, 2).unwrap()).unwrap(); // odd again
        assert!(matches!(
            b.push(Block::new(12, 13, 2).unwrap()),
            Err(BufferError::OutOfOrder { highest: 14, .. })
        ));
        assert!(matches!(
            b.push(Block::new(1003, 1004, 2).unwrap()),
            Err(BufferError::OutOfOrder { .. })
        ));
        let mut ids = vec![];
        while let Some(id) = b.next_id() {
            ids.push(id);
        }
        assert_eq!(ids, vec![1001, 1003, 1005, 10, 12, 14, 1007, 1009]);
    }

    #[test]
    fn refill_decisions_follow_the_low_water_mark() {
        let mut b = Buffer::new(fixed(10)); // low water 5
        assert_eq!(b.start_refill(0), Some(10));
        assert_eq!(b.start_refill(0), None, "one refill at a time");
        b.refill_done(Block::new(1, 11, 1).unwrap()).unwrap();
        assert_eq!(b.start_refill(0), None, "full");
        for _ in 0..5 {
            b.next_id().unwrap();
        }
        assert_eq!(b.start_refill(0), None, "exactly at the mark");
        b.next_id().unwrap();
        assert_eq!(b.start_refill(0), Some(10));
        b.refill_failed();
        assert!(b.wants_refill());
    }

    #[test]
    fn adaptive_sizing_tracks_demand() {
        let policy = BufferPolicy::new(BufferConfig {
            sizing: Sizing::Adaptive {
                buffer_seconds: 2.0,
                min_block: 100,
                max_block: 1_000_000,
            },
            low_water: 0.5,
            demand_window: Duration::from_secs(1),
        })
        .unwrap();
        let mut b = Buffer::new(policy);
        assert_eq!(b.target_block(), 100);
        let spec = SequenceSpec::default_64();
        let mut wm = spec.initial_watermark();
        b.observe(0);
        // 10 seconds at 50,000 ids/s, observed every 100 ms.
        for tick in 1..=100u64 {
            let blk = spec.reserve(wm, 1_000_000).unwrap();
            wm = blk.end();
            if b.buffered() < 5_000 {
                b.push(blk).unwrap();
            }
            let mut out = Vec::new();
            assert_eq!(b.take(5_000, &mut out), 5_000);
            b.observe(tick * 100_000_000);
        }
        let rate = b.demand_per_sec();
        assert!((rate - 50_000.0).abs() < 500.0, "rate {rate}");
        assert!(
            (99_000..=101_000).contains(&b.target_block()),
            "{}",
            b.target_block()
        );
        // Demand stops: the average decays and the block shrinks back toward the minimum.
        for tick in 101..=200u64 {
            b.observe(tick * 100_000_000);
        }
        assert!(b.target_block() < 100 * 2, "{}", b.target_block());
    }

    /// Guards the idle-then-burst case of the slow-backend benchmark: after
    /// an idle spell the average has decayed, and sizing from it alone would refill a buffer
    /// that drains in less than an authority round trip. One observed interval of the burst must
    /// lift the block size to the burst's rate.
    #[test]
    fn a_burst_after_idle_is_sized_from_the_latest_interval() {
        let policy = BufferPolicy::new(BufferConfig {
            sizing: Sizing::Adaptive {
                buffer_seconds: 2.0,
                min_block: 100,
                max_block: 10_000_000,
            },
            low_water: 0.5,
            demand_window: Duration::from_secs(5),
        })
        .unwrap();
        let mut b = Buffer::new(policy);
        b.push(Block::new(1, 100_000_000, 1).unwrap()).unwrap();
        b.observe(0);
        // 30 idle seconds, observed every 100 ms.
        for tick in 1..=300u64 {
            b.observe(tick * 100_000_000);
        }
        assert_eq!(b.target_block(), 100, "idle: back to the minimum");
        // 100 ms at 50,000 ids/s.
        let mut out = Vec::new();
        b.take(5_000, &mut out);
        b.observe(301 * 100_000_000);
        assert!(
            b.demand_per_sec() < 10_000.0,
            "the average lags: {}",
            b.demand_per_sec()
        );
        assert_eq!(
            b.target_block(),
            100_000,
            "sized from the burst: 50,000/s x 2 s"
        );
        // A single batch within a few milliseconds does not count as a flood.
        b.take(5_000, &mut out);
        b.observe(301 * 100_000_000 + 2_000_000);
        assert_eq!(b.target_block(), 100_000);
    }

    #[test]
    fn shutdown_tail_and_burn_accounting() {
        let mut b = Buffer::new(fixed(10));
        b.push(Block::new(1, 11, 1).unwrap()).unwrap();
        b.push(Block::new(11, 21, 1).unwrap()).unwrap(); // contiguous: merged
        b.push(Block::new(31, 41, 1).unwrap()).unwrap(); // a gap: kept apart
        for _ in 0..3 {
            b.next_id().unwrap();
        }
        let tail = b.take_unused_tail().unwrap();
        assert_eq!((tail.start(), tail.end()), (31, 41));
        b.record_given_back(tail.len());
        let s = b.stats();
        assert_eq!(s.burned, 17);
        assert_eq!(
            s.received,
            s.served + s.burned + s.given_back + b.buffered()
        );
        assert_eq!(b.next_id(), None);
    }

    #[test]
    fn contiguous_blocks_merge_into_one_returnable_tail() {
        let mut b = Buffer::new(fixed(10));
        b.push(Block::new(1, 11, 1).unwrap()).unwrap();
        b.next_id().unwrap();
        b.push(Block::new(11, 21, 1).unwrap()).unwrap();
        let tail = b.take_unused_tail().unwrap();
        assert_eq!((tail.start(), tail.end(), tail.len()), (2, 21, 19));
        assert_eq!(b.stats().burned, 0);
    }

    #[test]
    fn every_unused_block_comes_out_in_order_and_uncounted() {
        let mut b = Buffer::new(fixed(10));
        b.push(Block::new(1, 11, 1).unwrap()).unwrap();
        b.push(Block::new(31, 41, 1).unwrap()).unwrap();
        b.push(Block::new(51, 61, 1).unwrap()).unwrap();
        assert_eq!(b.next_id(), Some(1));
        assert_eq!(b.next_id(), Some(2));
        let unused: Vec<(u64, u64)> = b
            .take_unused()
            .iter()
            .map(|k| (k.start(), k.end()))
            .collect();
        assert_eq!(unused, [(3, 11), (31, 41), (51, 61)]);
        assert_eq!(b.buffered(), 0);
        assert_eq!(b.next_id(), None);
        let s = b.stats();
        assert_eq!((s.burned, s.given_back), (0, 0));
        // Nothing left: a second call has nothing, and the buffer takes only higher blocks.
        assert!(b.take_unused().is_empty());
        assert!(b.push(Block::new(41, 51, 1).unwrap()).is_err());
    }

    #[test]
    fn bad_configs_are_rejected() {
        let bad = |sizing, low_water| {
            BufferPolicy::new(BufferConfig {
                sizing,
                low_water,
                ..BufferConfig::default()
            })
        };
        assert_eq!(
            bad(Sizing::Fixed(0), 0.5),
            Err(BufferConfigError::ZeroBlock)
        );
        assert_eq!(
            bad(Sizing::Fixed(1), 0.0),
            Err(BufferConfigError::BadLowWater(0.0))
        );
        assert!(matches!(
            bad(
                Sizing::Adaptive {
                    buffer_seconds: 1.0,
                    min_block: 10,
                    max_block: 5
                },
                0.5
            ),
            Err(BufferConfigError::MinAboveMax { .. })
        ));
        assert!(matches!(
            bad(
                Sizing::Adaptive {
                    buffer_seconds: f64::NAN,
                    min_block: 1,
                    max_block: 5
                },
                0.5
            ),
            Err(BufferConfigError::BadSeconds(_))
        ));
    }

    #[test]
    fn shared_block_chunks_are_disjoint_across_threads() {
        let spec = SequenceSpec::new(Width::Bits64, 1, 3, 2).unwrap();
        let block = spec.reserve(1, 1_000_000).unwrap();
        let shared = std::sync::Arc::new(SharedBlock::new(block));
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let s = shared.clone();
                std::thread::spawn(move || {
                    let mut ids = vec![];
                    while let Some(c) = s.take(97 + i) {
                        ids.extend(c.ids());
                    }
                    ids
                })
            })
            .collect();
        let mut all: Vec<u64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, block.ids().collect::<Vec<_>>());
    }

    #[test]
    fn a_put_back_restores_the_front_exactly() {
        let mut b = Buffer::new(fixed(10));
        b.push(Block::new(1, 11, 1).unwrap()).unwrap();
        b.push(Block::new(20, 30, 1).unwrap()).unwrap();
        let mut t = Taken::new();
        assert_eq!(b.take_for(&mut t, 3), 3);
        assert_eq!(b.take_for(&mut t, 12), 12);
        assert_eq!(
            t.ids().collect::<Vec<_>>(),
            [(1..=10).collect::<Vec<_>>(), (20..=24).collect()].concat()
        );
        assert_eq!((b.buffered(), b.stats().served), (5, 15));
        // A refill arriving meanwhile goes to the back and does not prevent the put-back.
        b.push(Block::new(30, 35, 1).unwrap()).unwrap();
        assert_eq!(b.put_back(t), PutBack::Restored(15));
        let s = b.stats();
        assert_eq!((b.buffered(), s.served, s.burned), (25, 0, 0));
        let mut again = vec![];
        b.take(16, &mut again);
        assert_eq!(
            again,
            [(1..=10).collect::<Vec<_>>(), (20..=25).collect()].concat()
        );
        // The block structure is as before: the newest block is still whole and returnable.
        let tail = b.take_unused_tail().unwrap();
        assert_eq!((tail.start(), tail.end()), (26, 35));
    }

    #[test]
    fn a_lower_tier_tail_goes_back_only_if_nothing_was_taken_after_it() {
        let mut b = Buffer::new(fixed(10));
        b.push(Block::new(1, 101, 1).unwrap()).unwrap();
        let mut lease = Taken::new();
        let block = b.take_block_for(&mut lease, 40).unwrap(); // 1..=40 to a lower tier
        assert_eq!((block.start(), block.end()), (1, 41));
        // Not a tail of the lease: another end, another step, a start off the block.
        for bad in [(30, 40, 1), (30, 41, 2), (0, 41, 1), (50, 60, 1)] {
            let tail = Block::new(bad.0, bad.1, bad.2).unwrap();
            assert_eq!(b.take_back_tail(&lease, tail), None, "{bad:?}");
        }
        assert_eq!((b.buffered(), b.stats().served), (60, 40));
        // The lower tier used 1..=30: 31..=40 go back in front, served next.
        let tail = Block::new(31, 41, 1).unwrap();
        assert_eq!(b.take_back_tail(&lease, tail), Some(PutBack::Restored(10)));
        let s = b.stats();
        assert_eq!((b.buffered(), s.served, s.burned), (70, 30, 0));
        assert_eq!(b.next_id(), Some(31));
        // A second lease, then someone takes after it: its tail is burned, never re-served.
        let mut lease = Taken::new();
        let block = b.take_block_for(&mut lease, 10).unwrap(); // 32..=41
        assert_eq!(b.next_id(), Some(42));
        let tail = Block::new(40, block.end(), 1).unwrap();
        assert_eq!(b.take_back_tail(&lease, tail), Some(PutBack::Burned(2)));
        assert_eq!(b.next_id(), Some(43));
        let s = b.stats();
        assert_eq!(s.received, s.served + s.burned + b.buffered());
    }

    #[test]
    fn joined_leases_take_back_a_tail_that_starts_in_the_older_one() {
        let mut b = Buffer::new(fixed(10));
        b.push(Block::new(1, 101, 1).unwrap()).unwrap();
        let mut first = Taken::new();
        b.take_block_for(&mut first, 10).unwrap(); // 1..=10
        let mut second = Taken::new();
        b.take_block_for(&mut second, 20).unwrap(); // 11..=30, right after
        let both = Taken::joined(&first, &second).unwrap();
        assert_eq!(both.blocks(), [Block::new(1, 31, 1).unwrap()]);
        assert_eq!(both.len(), 30);
        // The lower tier used 1..=3: 4..=30 go back, served next.
        let tail = Block::new(4, 31, 1).unwrap();
        assert_eq!(b.take_back_tail(&both, tail), Some(PutBack::Restored(27)));
        assert_eq!(b.next_id(), Some(4));
        // Not joined: something taken in between, or blocks that do not meet.
        let mut third = Taken::new();
        b.take_block_for(&mut third, 5).unwrap(); // 5..=9
        assert_eq!(b.next_id(), Some(10));
        let mut fourth = Taken::new();
        b.take_block_for(&mut fourth, 5).unwrap(); // 11..=15
        assert_eq!(Taken::joined(&third, &fourth), None);
        let mut fifth = Taken::new();
        b.take_block_for(&mut fifth, 5).unwrap(); // 16..=20
        assert_eq!(Taken::joined(&third, &fifth), None);
        assert!(Taken::joined(&fourth, &fifth).is_some());
        let mut other = Buffer::new(fixed(10));
        other.push(Block::new(0, 20, 2).unwrap()).unwrap();
        other.push(Block::new(40, 50, 2).unwrap()).unwrap();
        let (mut x, mut y) = (Taken::new(), Taken::new());
        other.take_block_for(&mut x, 100).unwrap(); // 0..=18
        other.take_block_for(&mut y, 100).unwrap(); // 40..=48
        assert_eq!(Taken::joined(&x, &y), None);
    }

    #[test]
    fn a_tail_of_a_block_that_emptied_the_buffer_goes_back_before_the_next_block() {
        let mut b = Buffer::new(fixed(10));
        b.push(Block::new(0, 20, 2).unwrap()).unwrap();
        let mut lease = Taken::new();
        b.take_block_for(&mut lease, 100).unwrap(); // every id: 0, 2, ..., 18
        b.push(Block::new(40, 50, 2).unwrap()).unwrap(); // a refill arrives meanwhile
        let tail = Block::new(12, 20, 2).unwrap();
        assert_eq!(b.take_back_tail(&lease, tail), Some(PutBack::Restored(4)));
        let mut ids = vec![];
        b.take(100, &mut ids);
        assert_eq!(ids, [12, 14, 16, 18, 40, 42, 44, 46, 48]);
    }

    #[test]
    fn ids_cannot_go_back_once_later_ids_were_taken() {
        let mut b = Buffer::new(fixed(10));
        b.push(Block::new(1, 11, 1).unwrap()).unwrap();
        let (mut first, mut second) = (Taken::new(), Taken::new());
        b.take_for(&mut first, 3); // 1..=3
        b.take_for(&mut second, 2); // 4, 5
        assert_eq!(b.put_back(first), PutBack::Burned(3), "4 and 5 are out");
        // The later request is still on top: it may go back.
        assert_eq!(b.put_back(second), PutBack::Restored(2));
        assert_eq!(b.next_id(), Some(4));
        let s = b.stats();
        assert_eq!((s.served, s.burned, b.buffered()), (1, 3, 6));
        assert_eq!(s.received, s.served + s.burned + b.buffered());
    }

    #[test]
    fn a_request_whose_takes_interleave_with_others_cannot_go_back() {
        let mut b = Buffer::new(fixed(10));
        b.push(Block::new(1, 11, 1).unwrap()).unwrap();
        let mut t = Taken::new();
        b.take_for(&mut t, 2); // 1, 2
        assert_eq!(b.next_id(), Some(3));
        b.take_for(&mut t, 2); // 4, 5
        assert_eq!(b.put_back(t), PutBack::Burned(4));
        assert_eq!(b.next_id(), Some(6));
        // Nor after a shutdown emptied the buffer.
        let mut t = Taken::new();
        b.take_block_for(&mut t, 2).unwrap();
        b.take_unused_tail().unwrap();
        assert_eq!(b.put_back(t), PutBack::Burned(2));
        assert_eq!(b.next_id(), None);
        assert_eq!(b.put_back(Taken::new()), PutBack::Restored(0));
    }

    #[test]
    fn put_back_keeps_each_residue_class_in_order() {
        let mut b = Buffer::new(fixed(4));
        b.push(Block::new(1001, 1006, 2).unwrap()).unwrap(); // 1001, 1003, 1005
        b.push(Block::new(10, 15, 2).unwrap()).unwrap(); // 10, 12, 14
        let mut t = Taken::new();
        assert_eq!(b.take_for(&mut t, 4), 4);
        assert_eq!(b.put_back(t), PutBack::Restored(4));
        let mut ids = vec![];
        while let Some(id) = b.next_id() {
            ids.push(id);
        }
        assert_eq!(ids, vec![1001, 1003, 1005, 10, 12, 14]);
        assert!(b.push(Block::new(1005, 1010, 2).unwrap()).is_err());
    }

    proptest! {
        /// Any interleaving of refills, plain takes, and takes, put-backs and completions of
        /// several concurrent requests: no id is handed out twice, the ids of successful takes
        /// stay strictly increasing in the order taken (put-back ids come out again before
        /// anything above them), a put-back succeeds exactly when nothing else took since the
        /// request's first take, and `received == served + buffered + burned + given_back`
        /// holds after every step.
        #[test]
        fn put_back_keeps_ids_unique_ordered_and_accounted(
            ops in prop::collection::vec((0u8..6, 0usize..3, 1u64..30, 0u64..4), 1..250),
            step in 1u64..4,
        ) {
            let spec = SequenceSpec::new(Width::Bits32, 1, step, 0).unwrap();
            let mut wm = spec.initial_watermark();
            let mut b = Buffer::new(fixed(16));
            let mut received = std::collections::BTreeSet::new();
            // Ids taken and not put back, in take order, with the request that took them
            // (0: a plain take).
            let mut stream: Vec<(u64, u64)> = vec![];
            let mut burned = std::collections::BTreeSet::new();
            // Requests in flight: (tag, record, index into `events` of their first take).
            let mut open: Vec<Option<(u64, Taken, usize)>> = vec![None, None, None];
            // Who took from or put back into the buffer's front, in order.
            let mut events: Vec<u64> = vec![];
            let mut next_tag = 1u64;
            for (op, slot, n, gap) in ops {
                match op {
                    0 => {
                        wm += gap * step;
                        let blk = spec.reserve(wm, n).unwrap();
                        wm = blk.end();
                        received.extend(blk.ids());
                        b.push(blk).unwrap();
                    }
                    1 => {
                        let mut out = vec![];
                        b.take(n, &mut out);
                        if !out.is_empty() { events.push(0) }
                        stream.extend(out.into_iter().map(|id| (0, id)));
                    }
                    2 | 3 => {
                        let (tag, t, first) = open[slot].get_or_insert_with(|| {
                            next_tag += 1;
                            (next_tag, Taken::new(), usize::MAX)
                        });
                        let before = t.len();
                        let got = if op == 2 {
                            b.take_for(t, n)
                        } else {
                            b.take_block_for(t, n).map_or(0, |blk| blk.len())
                        };
                        prop_assert_eq!(t.len(), before + got);
                        if got > 0 {
                            if *first == usize::MAX { *first = events.len() }
                            events.push(*tag);
                            let new: Vec<u64> = t.ids().skip(before as usize).collect();
                            stream.extend(new.into_iter().map(|id| (*tag, id)));
                        }
                    }
                    4 => {
                        if let Some((tag, t, first)) = open[slot].take() {
                            let len = t.len();
                            let sole = first == usize::MAX
                                || events[first..].iter().all(|e| *e == tag);
                            let mine: Vec<u64> =
                                stream.iter().filter(|(w, _)| *w == tag).map(|(_, id)| *id).collect();
                            stream.retain(|(w, _)| *w != tag);
                            match b.put_back(t) {
                                PutBack::Restored(k) => {
                                    prop_assert!(sole, "restored over someone else's take");
                                    prop_assert_eq!(k, len);
                                    if k > 0 { events.push(u64::MAX) }
                                }
                                PutBack::Burned(k) => {
                                    prop_assert!(!sole, "burned though nothing was taken since");
                                    prop_assert_eq!(k, len);
                                    burned.extend(mine);
                                }
                            }
                        }
                    }
                    _ => { open[slot] = None; } // the request succeeded: its ids stay served
                }
                let s = b.stats();
                prop_assert_eq!(s.received, s.served + b.buffered() + s.burned + s.given_back);
                prop_assert_eq!(s.served, stream.len() as u64);
                prop_assert_eq!(s.burned, burned.len() as u64);
            }
            while let Some(id) = b.next_id() { stream.push((0, id)) }
            let ids: Vec<u64> = stream.iter().map(|(_, id)| *id).collect();
            prop_assert!(ids.windows(2).all(|w| w[0] < w[1]), "{:?}", ids);
            // Every id received was handed out exactly once or burned, never both.
            let handed: std::collections::BTreeSet<u64> = ids.iter().copied().collect();
            prop_assert!(handed.is_disjoint(&burned));
            prop_assert_eq!(handed.len() + burned.len(), received.len());
            prop_assert_eq!(
                handed.union(&burned).copied().collect::<Vec<_>>(),
                received.into_iter().collect::<Vec<_>>()
            );
        }

        /// Whatever the sequence of blocks and takes, ids come out strictly increasing, each once,
        /// and the accounting identity holds.
        #[test]
        fn ids_leave_in_order_and_accounting_holds(
            ops in prop::collection::vec((0u8..4, 1u64..50, 0u64..5), 1..200),
            step in 1u64..5,
        ) {
            let spec = SequenceSpec::new(Width::Bits32, 1, step, 0).unwrap();
            let mut wm = spec.initial_watermark();
            let mut b = Buffer::new(fixed(16));
            let mut out: Vec<u64> = vec![];
            for (op, n, gap) in ops {
                match op {
                    0 => {
                        wm += gap * step; // another node took some ids in between
                        let blk = spec.reserve(wm, n).unwrap();
                        wm = blk.end();
                        b.push(blk).unwrap();
                    }
                    1 => { if let Some(id) = b.next_id() { out.push(id) } }
                    2 => { b.take(n, &mut out); }
                    _ => { if let Some(blk) = b.take_block(n) { out.extend(blk.ids()) } }
                }
            }
            prop_assert!(out.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(out.iter().all(|id| id % step == 0));
            let s = b.stats();
            prop_assert_eq!(s.served, out.len() as u64);
            prop_assert_eq!(s.received, s.served + b.buffered());
            let buffered = b.buffered();
            if let Some(t) = b.take_unused_tail() { b.record_burned(t.len()); }
            let s = b.stats();
            prop_assert_eq!(s.received, s.served + s.burned);
            prop_assert_eq!(s.burned, buffered);
        }
    }

    /// The floor on every path that puts ids in: a block, a failed request's put-back, a
    /// lower tier's tail; what falls below is burned and the accounting adds up.
    #[test]
    fn nothing_below_the_floor_is_buffered_again() {
        let mut b = Buffer::new(fixed(10));
        b.push(Block::new(1, 11, 1).unwrap()).unwrap();
        let mut lease = Taken::new();
        let leased = b.take_block_for(&mut lease, 4).unwrap();
        assert_eq!((leased.start(), leased.end()), (1, 5));
        let mut request = Taken::new();
        assert_eq!(b.take_for(&mut request, 6), 6);
        // The floor rises above everything held: the (empty) buffer burns nothing.
        assert_eq!(b.raise_floor(100), 0);
        assert_eq!(b.floor(), 100);
        assert_eq!(b.put_back(request), PutBack::Burned(6));
        let tail = Block::new(2, 5, 1).unwrap();
        assert_eq!(b.take_back_tail(&lease, tail), Some(PutBack::Burned(3)));
        // A block reserved before the floor rose, landing now: received, burned whole.
        b.push(Block::new(11, 21, 1).unwrap()).unwrap();
        assert_eq!(b.buffered(), 0);
        b.push(Block::new(100, 110, 1).unwrap()).unwrap();
        assert_eq!(b.next_id(), Some(100));
        let s = b.stats();
        assert_eq!(
            s.received,
            s.served + b.buffered() + s.burned + s.given_back,
            "{s:?}"
        );
        // Never lowered.
        assert_eq!(b.raise_floor(5), 0);
        assert_eq!(b.floor(), 100);
    }

    /// Two members' blocks queued in arrival order, the one below the floor behind one above
    /// it: the floor still reaches it.
    #[test]
    fn a_block_below_the_floor_behind_a_higher_class_is_burned() {
        let mut b = Buffer::new(fixed(10));
        b.push(Block::new(960, 1008, 2).unwrap()).unwrap();
        b.push(Block::new(843, 891, 2).unwrap()).unwrap();
        assert_eq!(b.lowest(), Some(960));
        assert_eq!(b.raise_floor(904), 48);
        let mut out = Vec::new();
        b.take(100, &mut out);
        assert!(out.iter().all(|&id| id >= 904), "{out:?}");
    }

    /// A failed request that took blocks of two classes, the second below a floor raised
    /// meanwhile: its put-back is burned whole, not restored (the first id alone is above).
    #[test]
    fn a_put_back_with_a_block_below_the_floor_behind_its_first_is_burned() {
        let mut b = Buffer::new(fixed(10));
        b.push(Block::new(960, 1008, 2).unwrap()).unwrap();
        b.push(Block::new(843, 891, 2).unwrap()).unwrap();
        let mut request = Taken::new();
        assert_eq!(b.take_for(&mut request, 100), 48);
        assert_eq!(b.raise_floor(904), 0);
        assert_eq!(b.put_back(request), PutBack::Burned(48));
        assert_eq!(b.next_id(), None);
    }
}
