//! The snowflake generator: 64-bit time-ordered ids without coordination on the hot path.
//!
//! Invariants (docs/design.md invariant 4, the part that is local to one process):
//! - every id a generator returns is strictly greater than every id it returned before, from
//!   any thread: the generator's whole state is one `AtomicU64` holding the last issued
//!   `(timestamp, sequence)`, advanced only by compare-and-swap to a larger value;
//! - it never issues a timestamp below one it issued before, nor below the `resume_after`
//!   timestamp it was started with (the last one a previous holder of the worker id issued);
//! - time comes from the monotonic clock anchored to wall time at start (`AnchoredTime`), so
//!   a wall clock stepping backwards does not move it back; [`SnowflakeGenerator::check_clock`]
//!   reports such steps, and adopts forward steps;
//! - when a time unit's sequence is used up it returns [`NextIdError::SequenceExhausted`] with
//!   the time left until the next unit, never an id from the future and never a sleep;
//! - it never issues a timestamp at or above its **limit** ([`SnowflakeGenerator::set_limit`];
//!   none by default): the holder of a worker lease sets it to the time floor it durably
//!   recorded (and the lease's expiry), so every id issued lies below a recorded floor, and
//!   sets it to 0 when the lease is lost ([`NextIdError::BeyondLimit`]).
//!
//! The default clock is [`CoarseClock`]: the hot path reads its cached monotonic time (one atomic
//! load), adds the generator's fused offset (anchor, adopted forward steps and epoch in one
//! atomic) and divides by the unit (a multiply for 1 ms units); the precise clock is read only
//! before returning `SequenceExhausted`, so a lagging cache never costs ids and never stamps an
//! id ahead of the precise clock. The limit is read on every claim.
//!
//! What it does not do: choose or lease the worker id (configuration or a worker lease does),
//! persist the last timestamp (the caller does, from [`SnowflakeGenerator::last_timestamp`]).

use crate::clock::{Clock, CoarseClock};
use crate::layout::Layout;
use crate::sync::{AtomicU64, Ordering};
use std::time::Duration;
use thiserror::Error;

/// Why a generator cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum GeneratorError {
    /// The node id does not fit the layout's node field.
    #[error("node id {node} does not fit in the layout's {bits} node bits (maximum {max})")]
    NodeOutOfRange {
        /// The node id given.
        node: u64,
        /// The layout's node bits.
        bits: u8,
        /// The largest node id.
        max: u64,
    },
    /// The wall clock reads a time before the layout's epoch.
    #[error("the clock reads {now_ms} ms since 1970, before the layout's epoch {epoch_ms} ms")]
    BeforeEpoch {
        /// The wall clock, ms since the Unix epoch.
        now_ms: u64,
        /// The layout's epoch.
        epoch_ms: u64,
    },
    /// The layout's timestamp field is already used up.
    #[error("the layout's timestamp field ran out at {end_ms} ms since 1970")]
    TimeExhausted {
        /// The end of the layout's time, ms since the Unix epoch.
        end_ms: u64,
    },
}

/// Why no id was issued this time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum NextIdError {
    /// Every sequence value of the current time unit is used; the next unit starts in `wait`.
    #[error("sequence exhausted for this time unit; retry in {wait:?}")]
    SequenceExhausted {
        /// Time until the next unit.
        wait: Duration,
    },
    /// The layout's timestamp field has no room for the current time.
    #[error("the layout's timestamp field has run out")]
    TimeExhausted,
    /// The current timestamp is at or above the generator's limit (the time floor its worker
    /// lease recorded, or the lease's expiry): nothing may be issued until the limit is raised.
    #[error("timestamp {timestamp} is at or above the generator's limit {limit}")]
    BeyondLimit {
        /// The timestamp that would have been issued (layout units since the epoch).
        timestamp: u64,
        /// The limit (layout units since the epoch; 0 when the lease was lost).
        limit: u64,
    },
}

/// What [`SnowflakeGenerator::check_clock`] found when it compared the wall clock with the
/// generator's own time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockCheck {
    /// Within tolerance.
    InStep,
    /// The wall clock is behind the generator's time (it stepped backwards). The generator keeps
    /// its own time; ids stay increasing.
    WallBehind {
        /// By how much.
        by: Duration,
    },
    /// The wall clock was ahead (it stepped forwards); the generator moved its time forward.
    WallAheadAdopted {
        /// By how much.
        by: Duration,
    },
}

/// Monotonic time anchored to the wall clock at construction: `anchor_wall + (mono - anchor_mono)
/// + forward`, where `forward` only grows (wall-clock steps forward that were adopted).
///
/// The hot path reads it relative to the layout's epoch as `max(mono, anchor_mono) + offset`, with
/// `offset = anchor_wall - epoch + forward - anchor_mono` fused into one atomic (one load per
/// reading); the `max` keeps a coarse reading that lags the anchor's precise one from taking time
/// below the anchor. No overflow: the result is nanoseconds since the epoch (u64 lasts 584 years).
#[derive(Debug)]
pub(crate) struct AnchoredTime<C> {
    clock: C,
    anchor_mono_nanos: u64,
    epoch_nanos: u64,
    /// `anchor_wall - epoch + forward - anchor_mono`, modulo 2^64; only grows.
    offset_nanos: AtomicU64,
}

impl<C: Clock> AnchoredTime<C> {
    /// Anchors at the wall clock, or at `floor_nanos` if the wall clock is behind it;
    /// `epoch_nanos` (at or below the floor) is the origin of [`Self::since_epoch_nanos`].
    pub(crate) fn new(clock: C, floor_nanos: u64, epoch_nanos: u64) -> Self {
        let anchor_mono_nanos = clock.monotonic_nanos();
        let anchor_wall_nanos = clock.wall_nanos().max(floor_nanos).max(epoch_nanos);
        AnchoredTime {
            clock,
            anchor_mono_nanos,
            epoch_nanos,
            offset_nanos: AtomicU64::new(
                (anchor_wall_nanos - epoch_nanos).wrapping_sub(anchor_mono_nanos),
            ),
        }
    }

    #[inline(always)]
    fn since_epoch_of(&self, mono: u64) -> u64 {
        // `max(mono, anchor_mono) - anchor_mono + anchor_wall - epoch + forward`, the last four
        // terms fused into the offset (which wraps below zero when the monotonic origin is
        // later than `anchor_wall - epoch`; the sum does not, as `max` keeps it at or above
        // `anchor_wall - epoch`).
        mono.max(self.anchor_mono_nanos)
            .wrapping_add(self.offset_nanos.load(Ordering::Relaxed))
    }

    /// Now, in nanoseconds since the epoch, never decreasing.
    #[inline]
    pub(crate) fn since_epoch_nanos(&self) -> u64 {
        self.since_epoch_of(self.clock.monotonic_nanos())
    }

    /// Like [`Self::since_epoch_nanos`] from the clock's coarse reading: may lag, never runs
    /// ahead.
    #[inline(always)]
    pub(crate) fn coarse_since_epoch_nanos(&self) -> u64 {
        self.since_epoch_of(self.clock.coarse_monotonic_nanos())
    }

    /// Now, in nanoseconds since the Unix epoch, never decreasing.
    #[inline]
    pub(crate) fn now_nanos(&self) -> u64 {
        self.epoch_nanos.saturating_add(self.since_epoch_nanos())
    }

    /// Compares with the wall clock; adopts forward steps beyond `tolerance`.
    pub(crate) fn check(&self, tolerance: Duration) -> ClockCheck {
        let own = self.now_nanos();
        let wall = self.clock.wall_nanos();
        let tol = u64::try_from(tolerance.as_nanos()).unwrap_or(u64::MAX);
        if wall.saturating_add(tol) < own {
            ClockCheck::WallBehind {
                by: Duration::from_nanos(own - wall),
            }
        } else if wall > own.saturating_add(tol) {
            let by = wall - own;
            self.offset_nanos.fetch_add(by, Ordering::Relaxed);
            ClockCheck::WallAheadAdopted {
                by: Duration::from_nanos(by),
            }
        } else {
            ClockCheck::InStep
        }
    }
}

/// `x / 1_000_000`, written as the multiply the compiler would emit for a constant divisor, so it
/// stays a multiply when a run-time division by the same value sits in the other branch (LLVM
/// otherwise merges both into one `div`). `1_000_000 = 2^6 * 15625` and
/// `M = ceil(2^71 / 15625) = 0x0218_def4_16bd_b1a7` with `M * 15625 - 2^71 = 2527 < 2^13`, so for
/// every `y = x >> 6 < 2^58` the error of `y * M / 2^71` against `y / 15625` is below `1/15625`
/// and the floors agree (Granlund and Montgomery).
#[inline(always)]
pub(crate) fn div_by_million(x: u64) -> u64 {
    ((u128::from(x >> 6) * 0x0218_def4_16bd_b1a7) >> 71) as u64
}

/// Sentinel state: nothing issued yet and no floor. Never a valid packed state, because a
/// layout's timestamp and sequence bits add up to at most 63.
const NOTHING_ISSUED: u64 = u64::MAX;

/// A snowflake id generator for one node id. Thread-safe and lock-free; share it by reference
/// or `Arc`. See the module docs for its guarantees.
#[derive(Debug)]
pub struct SnowflakeGenerator<C: Clock = CoarseClock> {
    layout: Layout,
    node: u64,
    node_part: u64,
    seq_bits: u32,
    /// `layout.unit_nanos()`.
    unit_nanos: u64,
    /// Whether the unit is 1 ms, which takes a constant-divisor path (a multiply). A flag, not a
    /// comparison of `unit_nanos`: the compiler would merge `x / 1_000_000` when `unit_nanos ==
    /// 1_000_000` back into one run-time division.
    unit_is_ms: bool,
    /// `unit_nanos` if `(max_timestamp + 1) * unit_nanos` fits in 64 bits (every layout whose
    /// time ends within 584 years of its epoch), else 0: the hot path's same-unit test.
    unit_span: u64,
    /// `layout.max_timestamp()` and `layout.max_sequence()`, precomputed for the hot path.
    max_timestamp: u64,
    max_sequence: u64,
    time: AnchoredTime<C>,
    /// Last issued `(timestamp << seq_bits) | sequence`, or [`NOTHING_ISSUED`].
    state: AtomicU64,
    /// No timestamp at or above this is issued (`u64::MAX`: no limit).
    limit: AtomicU64,
}

impl<C: Clock> SnowflakeGenerator<C> {
    /// A generator for `node`. `resume_after` is the last timestamp (in layout units) that any
    /// earlier holder of this node id issued: every id will have a larger timestamp, even if the
    /// wall clock now reads earlier.
    pub fn new(
        layout: Layout,
        node: u64,
        clock: C,
        resume_after: Option<u64>,
    ) -> Result<Self, GeneratorError> {
        if node > layout.max_node() {
            return Err(GeneratorError::NodeOutOfRange {
                node,
                bits: layout.node_bits(),
                max: layout.max_node(),
            });
        }
        #[cfg(feature = "planted")]
        let resume_after =
            resume_after.filter(|_| !crate::planted::on(crate::planted::WALL_ANCHOR));
        let wall = clock.wall_nanos();
        if wall < layout.epoch_nanos() && resume_after.is_none() {
            return Err(GeneratorError::BeforeEpoch {
                now_ms: wall / 1_000_000,
                epoch_ms: layout.spec().epoch_unix_ms,
            });
        }
        let end_ms = layout.end_of_time_nanos() / 1_000_000;
        let floor_nanos = match resume_after {
            Some(ts) if ts >= layout.max_timestamp() => {
                return Err(GeneratorError::TimeExhausted { end_ms })
            }
            Some(ts) => layout.unix_nanos_of(ts + 1),
            None => layout.epoch_nanos(),
        };
        let time = AnchoredTime::new(clock, floor_nanos, layout.epoch_nanos());
        let seq_bits = u32::from(layout.sequence_bits());
        let state = match resume_after {
            // The whole of `ts` counts as used.
            Some(ts) => (ts << seq_bits) | layout.max_sequence(),
            None => NOTHING_ISSUED,
        };
        let generator = SnowflakeGenerator {
            layout,
            node,
            node_part: layout.node_part(node),
            seq_bits,
            unit_nanos: layout.unit_nanos(),
            unit_is_ms: layout.unit_nanos() == 1_000_000,
            unit_span: match (layout.max_timestamp() + 1).checked_mul(layout.unit_nanos()) {
                Some(_) => layout.unit_nanos(),
                None => 0,
            },
            max_timestamp: layout.max_timestamp(),
            max_sequence: layout.max_sequence(),
            time,
            state: AtomicU64::new(state),
            limit: AtomicU64::new(u64::MAX),
        };
        if generator.now_timestamp() > layout.max_timestamp() {
            return Err(GeneratorError::TimeExhausted { end_ms });
        }
        Ok(generator)
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// The node id.
    pub fn node(&self) -> u64 {
        self.node
    }

    #[inline]
    fn now_timestamp(&self) -> u64 {
        self.units(self.time.since_epoch_nanos())
    }

    /// Layout units in `since_epoch` nanoseconds. Millisecond units (every built-in layout but
    /// sonyflake) divide by a constant, which compiles to a multiply.
    #[inline(always)]
    fn units(&self, since_epoch: u64) -> u64 {
        if self.unit_is_ms {
            div_by_million(since_epoch)
        } else {
            since_epoch / self.unit_nanos
        }
    }

    #[inline]
    fn timestamp_of(&self, unix_nanos: u64) -> u64 {
        unix_nanos.saturating_sub(self.layout.epoch_nanos()) / self.layout.unit_nanos()
    }

    /// The generator's current time in nanoseconds since the Unix epoch.
    pub fn now_unix_nanos(&self) -> u64 {
        self.time.now_nanos()
    }

    /// Reserves up to `max` consecutive sequence values of one time unit in one atomic step.
    /// Returns `(timestamp, first_sequence, count)` with `1 <= count <= max`.
    ///
    /// The fast path is one load of the state, one coarse clock reading (one atomic load for
    /// [`CoarseClock`]), the fused time offset, the limit (both in the generator, read-mostly)
    /// and one compare-and-swap. Anything else (a unit used up, a lagging coarse reading, the
    /// limit, the end of the layout's time, a lost race) goes to [`Self::claim_slow`], which
    /// decides from scratch.
    #[inline]
    fn claim(&self, max: u64) -> Result<(u64, u64, u64), NextIdError> {
        let max = max.max(1);
        let seq_bits = self.seq_bits;
        let last = self.state.load(Ordering::Relaxed);
        let since_epoch = self.time.coarse_since_epoch_nanos();
        // The state's successor (NOTHING_ISSUED is u64::MAX, which wraps to 0) and its unit,
        // computed from the state alone, in parallel with the clock reading. The common case is
        // that the clock is in that unit, which takes one subtraction and one comparison against
        // the unit's start (no division on the path from the clock to the compare-and-swap):
        // `since_epoch - ts * unit < unit` exactly when `since_epoch / unit == ts`, as
        // `(ts + 1) * unit` fits in 64 bits for every `ts <= max_timestamp` (`unit_span` is 0,
        // never true, for a layout where it would not). Otherwise, if the clock is in a later
        // unit, that unit starts afresh. Either way the id's timestamp is at or below the clock's
        // unit, and the limit and the end of time bound it.
        let successor = last.wrapping_add(1);
        let successor_ts = successor >> seq_bits;
        let (ts, next) = if since_epoch.wrapping_sub(successor_ts.wrapping_mul(self.unit_nanos))
            < self.unit_span
        {
            (successor_ts, successor)
        } else {
            let now = self.units(since_epoch);
            if successor_ts > now {
                return self.claim_slow(max);
            }
            let next = if successor_ts < now {
                now << seq_bits
            } else {
                successor
            };
            (now, next)
        };
        if ts < self.limit.load(Ordering::Relaxed) && ts <= self.max_timestamp {
            // `next_id` (max 1) folds this to 1: `next` is below the unit's end.
            let count = if max == 1 {
                1
            } else {
                max.min(((ts + 1) << seq_bits) - next)
            };
            if self
                .state
                .compare_exchange_weak(last, next + count - 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Ok((ts, next & self.max_sequence, count));
            }
        }
        self.claim_slow(max)
    }

    /// [`Self::claim`]'s loop for everything but the uncontended common case.
    #[cold]
    #[inline(never)]
    fn claim_slow(&self, max: u64) -> Result<(u64, u64, u64), NextIdError> {
        let seq_bits = self.seq_bits;
        let mut last = self.state.load(Ordering::Relaxed);
        // The coarse clock first; the precise one only before telling the caller to wait, so a
        // lagging coarse reading never costs ids.
        let mut now = self.units(self.time.coarse_since_epoch_nanos());
        let mut precise = false;
        loop {
            let next = (now << seq_bits).max(last.wrapping_add(1));
            let ts = next >> seq_bits;
            if ts > now {
                if !precise {
                    precise = true;
                    now = self.now_timestamp();
                    continue;
                }
                // `last` used the whole of unit `now` (or later, after a floor): wait for `ts`.
                let wait_nanos = self
                    .layout
                    .unix_nanos_of(ts)
                    .saturating_sub(self.time.now_nanos());
                return Err(NextIdError::SequenceExhausted {
                    wait: Duration::from_nanos(wait_nanos.max(1)),
                });
            }
            if ts > self.layout.max_timestamp() {
                return Err(NextIdError::TimeExhausted);
            }
            // Relaxed is enough: a holder lowers the limit only to stop at once after its
            // lease's own deadline, which the limit it raised to already ended.
            let limit = self.limit.load(Ordering::Relaxed);
            if ts >= limit {
                return Err(NextIdError::BeyondLimit {
                    timestamp: ts,
                    limit,
                });
            }
            let unit_end = (ts + 1) << seq_bits;
            let count = max.min(unit_end - next);
            let new_last = next + count - 1;
            match self.state.compare_exchange_weak(
                last,
                new_last,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok((ts, next & self.layout.max_sequence(), count)),
                Err(actual) => last = actual,
            }
        }
    }

    /// The next id, strictly greater than every id this generator issued before.
    #[inline]
    pub fn next_id(&self) -> Result<u64, NextIdError> {
        let (ts, seq, _) = self.claim(1)?;
        Ok(self.layout.compose_unchecked(ts, 0, seq) | self.node_part)
    }

    /// Appends up to `max` ids to `out`, all from one time unit, in increasing order; returns
    /// how many were appended (at least 1). Cheaper than `max` calls of [`Self::next_id`].
    pub fn next_ids(&self, max: u64, out: &mut Vec<u64>) -> Result<u64, NextIdError> {
        let (ts, seq, count) = self.claim(max)?;
        out.extend(
            (seq..seq + count).map(|s| self.layout.compose_unchecked(ts, 0, s) | self.node_part),
        );
        Ok(count)
    }

    /// The largest timestamp (layout units since the epoch) issued so far, or the
    /// `resume_after` it was started with; `None` if neither. Persist it to resume above it.
    pub fn last_timestamp(&self) -> Option<u64> {
        match self.state.load(Ordering::Acquire) {
            NOTHING_ISSUED => None,
            packed => Some(packed >> self.seq_bits),
        }
    }

    /// Sets the limit: no timestamp at or above `timestamp` (layout units since the epoch) is
    /// issued from now on (`u64::MAX`: no limit; 0: nothing at all). May lower or raise it.
    pub fn set_limit(&self, timestamp: u64) {
        self.limit.store(timestamp, Ordering::Release);
    }

    /// The current limit (`u64::MAX`: none).
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }

    /// The layout timestamp of `unix_nanos`, 0 before the epoch.
    pub fn timestamp_at_unix_nanos(&self, unix_nanos: u64) -> u64 {
        self.timestamp_of(unix_nanos)
    }

    /// Compares the wall clock with the generator's time. A wall clock behind by more than
    /// `tolerance` is reported and ignored; one ahead by more is adopted (time moves forward).
    pub fn check_clock(&self, tolerance: Duration) -> ClockCheck {
        self.time.check(tolerance)
    }
}

/// Calls `next_id` until it succeeds, spinning (not sleeping) through sequence exhaustion.
/// For benchmarks and callers that prefer burning a core to a context switch.
#[inline]
pub fn next_id_spinning<C: Clock>(generator: &SnowflakeGenerator<C>) -> Result<u64, NextIdError> {
    loop {
        match generator.next_id() {
            Err(NextIdError::SequenceExhausted { .. }) => std::hint::spin_loop(),
            other => return other,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::clock::ManualClock;
    use crate::layout::{FieldOrder, LayoutSpec};
    use std::collections::HashSet;
    use std::sync::Arc;

    const NOW_MS: u64 = 1_780_000_000_000;

    fn tiny_layout(seq_bits: u8) -> Layout {
        Layout::new(LayoutSpec {
            timestamp_bits: 41,
            node_bits: 4,
            sequence_bits: seq_bits,
            time_unit: Duration::from_millis(1),
            epoch_unix_ms: 1_700_000_000_000,
            order: FieldOrder::NodeThenSequence,
            max_bits: 63,
        })
        .unwrap()
    }

    #[test]
    fn div_by_million_is_division() {
        let edges = [
            0,
            1,
            999_999,
            1_000_000,
            1_000_001,
            u64::MAX,
            u64::MAX - 1,
            (u64::MAX / 1_000_000) * 1_000_000,
            (u64::MAX / 1_000_000) * 1_000_000 - 1,
        ];
        for x in edges {
            assert_eq!(div_by_million(x), x / 1_000_000, "{x}");
        }
        // Around every multiple of 10^6 in a sweep of magnitudes, and a pseudo-random walk.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for shift in 20..64 {
            let m = ((1u64 << shift) / 1_000_000) * 1_000_000;
            for v in [m.wrapping_sub(1), m, m + 1] {
                assert_eq!(div_by_million(v), v / 1_000_000, "{v}");
            }
        }
        for _ in 0..1_000_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            assert_eq!(div_by_million(x), x / 1_000_000, "{x}");
        }
    }

    #[test]
    fn exhausting_a_unit_returns_the_wait_then_resumes() {
        let clock = ManualClock::at_unix_millis(NOW_MS);
        let g = SnowflakeGenerator::new(Layout::twitter(), 7, clock.clone(), None).unwrap();
        let ids: Vec<u64> = (0..4096).map(|_| g.next_id().unwrap()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        clock.advance_nanos(250_000);
        assert_eq!(
            g.next_id(),
            Err(NextIdError::SequenceExhausted {
                wait: Duration::from_micros(750)
            })
        );
        clock.advance_nanos(750_000);
        let next = g.next_id().unwrap();
        assert!(next > ids[4095]);
        let d = Layout::twitter().decode(next).unwrap();
        assert_eq!((d.parts.node, d.parts.sequence), (7, 0));
        assert_eq!(d.unix_millis(), NOW_MS + 1);
    }

    #[test]
    fn nothing_is_issued_at_or_above_the_limit() {
        let clock = ManualClock::at_unix_millis(NOW_MS);
        let layout = Layout::twitter();
        let g = SnowflakeGenerator::new(layout, 3, clock.clone(), None).unwrap();
        let now = layout.timestamp_at(NOW_MS * 1_000_000).unwrap();
        g.set_limit(now + 2);
        let a = g.next_id().unwrap();
        clock.advance_millis(1);
        let b = g.next_id().unwrap();
        assert!(b > a);
        clock.advance_millis(1);
        assert_eq!(
            g.next_id(),
            Err(NextIdError::BeyondLimit {
                timestamp: now + 2,
                limit: now + 2
            })
        );
        g.set_limit(0);
        clock.advance_millis(5);
        assert!(matches!(
            g.next_id(),
            Err(NextIdError::BeyondLimit { limit: 0, .. })
        ));
        g.set_limit(u64::MAX);
        let c = g.next_id().unwrap();
        assert!(c > b);
        assert_eq!(layout.decode(c).unwrap().unix_millis(), NOW_MS + 7);
    }

    #[test]
    fn wall_clock_step_backwards_keeps_time_and_is_reported() {
        let clock = ManualClock::at_unix_millis(NOW_MS);
        let g = SnowflakeGenerator::new(Layout::twitter(), 1, clock.clone(), None).unwrap();
        let a = g.next_id().unwrap();
        clock.advance_millis(3);
        clock.step_wall_millis(-5_000);
        let b = g.next_id().unwrap();
        assert!(b > a);
        assert_eq!(
            Layout::twitter().decode(b).unwrap().unix_millis(),
            NOW_MS + 3
        );
        assert_eq!(
            g.check_clock(Duration::from_millis(10)),
            ClockCheck::WallBehind {
                by: Duration::from_secs(5)
            }
        );
        // A forward step is adopted, so ids follow the corrected wall time.
        clock.step_wall_millis(5_000 + 2_000);
        assert_eq!(
            g.check_clock(Duration::from_millis(10)),
            ClockCheck::WallAheadAdopted {
                by: Duration::from_secs(2)
            }
        );
        let c = g.next_id().unwrap();
        assert_eq!(
            Layout::twitter().decode(c).unwrap().unix_millis(),
            NOW_MS + 2_003
        );
        assert_eq!(g.check_clock(Duration::from_millis(10)), ClockCheck::InStep);
    }

    #[test]
    fn restart_resumes_above_the_last_timestamp_even_with_the_clock_behind() {
        let clock = ManualClock::at_unix_millis(NOW_MS);
        let g = SnowflakeGenerator::new(Layout::twitter(), 3, clock.clone(), None).unwrap();
        let before: Vec<u64> = (0..100).map(|_| g.next_id().unwrap()).collect();
        let last_ts = g.last_timestamp().unwrap();
        // The machine reboots with a clock one minute behind.
        let rebooted = ManualClock::at_unix_millis(NOW_MS - 60_000);
        let g2 = SnowflakeGenerator::new(Layout::twitter(), 3, rebooted, Some(last_ts)).unwrap();
        let after = g2.next_id().unwrap();
        assert!(after > *before.last().unwrap());
        assert_eq!(
            Layout::twitter().decode(after).unwrap().parts.timestamp,
            last_ts + 1
        );
    }

    /// A clock whose coarse reading is frozen at its start, the worst lag a coarse clock may have.
    struct FrozenCoarse {
        precise: ManualClock,
        frozen_mono: u64,
    }
    impl Clock for FrozenCoarse {
        fn wall_nanos(&self) -> u64 {
            self.precise.wall_nanos()
        }
        fn monotonic_nanos(&self) -> u64 {
            self.precise.monotonic_nanos()
        }
        fn coarse_monotonic_nanos(&self) -> u64 {
            self.frozen_mono
        }
    }

    /// Guards the coarse hot path: a lagging coarse clock must neither cost ids
    /// (the precise clock is read before telling the caller to wait) nor stamp ids late beyond
    /// what the precise clock allows.
    #[test]
    fn a_lagging_coarse_clock_rereads_the_precise_one_before_waiting() {
        let precise = ManualClock::at_unix_millis(NOW_MS);
        let clock = FrozenCoarse {
            precise: precise.clone(),
            frozen_mono: 0,
        };
        let g = SnowflakeGenerator::new(tiny_layout(2), 1, clock, None).unwrap();
        let first: Vec<u64> = (0..4).map(|_| g.next_id().unwrap()).collect();
        assert!(matches!(
            g.next_id(),
            Err(NextIdError::SequenceExhausted { .. })
        ));
        precise.advance_millis(1);
        // The coarse clock still says the old unit; the precise one lets the next unit start.
        let next = g.next_id().unwrap();
        assert!(next > first[3]);
        assert_eq!(
            tiny_layout(2).decode(next).unwrap().unix_millis(),
            NOW_MS + 1
        );
    }

    /// A coarse reading that lags the precise one taken at construction (the anchor) must not
    /// take the generator's time below the anchor: the fused offset saturates the elapsed time.
    #[test]
    fn a_coarse_reading_behind_the_anchor_does_not_go_back() {
        let precise = ManualClock::at_unix_millis(NOW_MS);
        precise.advance_millis(5);
        let clock = FrozenCoarse {
            precise: precise.clone(),
            frozen_mono: 0,
        };
        let g = SnowflakeGenerator::new(Layout::twitter(), 1, clock, None).unwrap();
        let id = g.next_id().unwrap();
        assert_eq!(
            Layout::twitter().decode(id).unwrap().unix_millis(),
            NOW_MS + 5
        );
        assert_eq!(g.now_unix_nanos(), (NOW_MS + 5) * 1_000_000);
    }

    /// A limit lowered to the unit being issued stops the very next claim in that unit (the fast
    /// path reads the limit on every claim, not only when the unit changes).
    #[test]
    fn a_limit_lowered_within_a_unit_takes_effect_at_once() {
        let clock = ManualClock::at_unix_millis(NOW_MS);
        let layout = Layout::twitter();
        let g = SnowflakeGenerator::new(layout, 3, clock.clone(), None).unwrap();
        let now = layout.timestamp_at(NOW_MS * 1_000_000).unwrap();
        g.next_id().unwrap();
        g.set_limit(now);
        assert_eq!(
            g.next_id(),
            Err(NextIdError::BeyondLimit {
                timestamp: now,
                limit: now
            })
        );
        let mut out = Vec::new();
        assert!(g.next_ids(10, &mut out).is_err() && out.is_empty());
        g.set_limit(now + 1);
        assert!(g.next_id().is_ok());
    }

    /// A layout whose time outlasts 64 bits of nanoseconds (50 bits of seconds) cannot use the
    /// hot path's same-unit test (`unit_span` 0): it decides by division, with the same results.
    #[test]
    fn a_layout_beyond_64_bits_of_nanoseconds_still_counts_and_waits() {
        let layout = Layout::new(LayoutSpec {
            timestamp_bits: 50,
            node_bits: 0,
            sequence_bits: 2,
            time_unit: Duration::from_secs(1),
            epoch_unix_ms: 1_700_000_000_000,
            order: FieldOrder::NodeThenSequence,
            max_bits: 63,
        })
        .unwrap();
        let clock = ManualClock::at_unix_millis(NOW_MS);
        let g = SnowflakeGenerator::new(layout, 0, clock.clone(), None).unwrap();
        assert_eq!(g.unit_span, 0);
        let ids: Vec<u64> = (0..4).map(|_| g.next_id().unwrap()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert!(matches!(
            g.next_id(),
            Err(NextIdError::SequenceExhausted { .. })
        ));
        clock.advance_millis(1_000);
        let next = g.next_id().unwrap();
        assert!(next > ids[3]);
        assert_eq!(layout.decode(next).unwrap().unix_millis(), NOW_MS + 1_000);
    }

    /// Non-millisecond units (sonyflake's 10 ms) take the run-time divisor path.
    #[test]
    fn ten_millisecond_units_stamp_the_right_time() {
        let clock = ManualClock::at_unix_millis(NOW_MS);
        let layout = Layout::sonyflake();
        let g = SnowflakeGenerator::new(layout, 3, clock.clone(), None).unwrap();
        clock.advance_millis(25);
        let d = layout.decode(g.next_id().unwrap()).unwrap();
        assert_eq!(d.unix_millis(), NOW_MS + 20);
    }

    #[test]
    fn construction_errors_are_clear() {
        let clock = ManualClock::at_unix_millis(NOW_MS);
        assert!(matches!(
            SnowflakeGenerator::new(Layout::twitter(), 1024, clock.clone(), None),
            Err(GeneratorError::NodeOutOfRange { max: 1023, .. })
        ));
        let early = ManualClock::at_unix_millis(1_000);
        assert!(matches!(
            SnowflakeGenerator::new(Layout::twitter(), 1, early, None),
            Err(GeneratorError::BeforeEpoch { .. })
        ));
        let ended = Layout::new(LayoutSpec {
            timestamp_bits: 20,
            ..*tiny_layout(4).spec()
        })
        .unwrap();
        assert!(matches!(
            SnowflakeGenerator::new(ended, 1, clock, None),
            Err(GeneratorError::TimeExhausted { .. })
        ));
    }

    #[test]
    fn batches_stay_within_one_unit_and_increase() {
        let clock = ManualClock::at_unix_millis(NOW_MS);
        let g = SnowflakeGenerator::new(tiny_layout(4), 2, clock.clone(), None).unwrap();
        let mut out = Vec::new();
        assert_eq!(g.next_ids(10, &mut out).unwrap(), 10);
        assert_eq!(g.next_ids(10, &mut out).unwrap(), 6);
        assert!(g.next_ids(10, &mut out).is_err());
        clock.advance_millis(1);
        assert_eq!(g.next_ids(3, &mut out).unwrap(), 3);
        assert!(out.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(out.len(), 19);
    }

    /// Uniqueness and strict per-thread increase with 4 threads and 4 million ids. A thread that
    /// finds its time unit used up moves the manual clock on by the wait it was given, so
    /// exhaustion, waits and unit changes all happen, without sleeping.
    #[test]
    fn concurrent_ids_are_unique_and_increase_per_thread() {
        let clock = ManualClock::at_unix_millis(NOW_MS);
        let g = Arc::new(SnowflakeGenerator::new(tiny_layout(10), 5, clock.clone(), None).unwrap());
        let per_thread = 1_000_000;
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (g, clock) = (g.clone(), clock.clone());
                std::thread::spawn(move || {
                    let mut ids = Vec::with_capacity(per_thread);
                    let mut waits = 0u64;
                    while ids.len() < per_thread {
                        match g.next_id() {
                            Ok(id) => ids.push(id),
                            Err(NextIdError::SequenceExhausted { wait }) => {
                                waits += 1;
                                clock.advance_nanos(u64::try_from(wait.as_nanos()).unwrap());
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                    (ids, waits)
                })
            })
            .collect();
        let mut all = HashSet::with_capacity(4 * per_thread);
        let mut total_waits = 0;
        for h in handles {
            let (ids, waits) = h.join().unwrap();
            total_waits += waits;
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "ids of one thread must increase"
            );
            for id in ids {
                assert!(all.insert(id), "duplicate id {id}");
            }
        }
        assert_eq!(all.len(), 4 * per_thread);
        assert!(
            total_waits >= (4 * per_thread as u64) / 1024,
            "every unit ran out"
        );
    }
}
