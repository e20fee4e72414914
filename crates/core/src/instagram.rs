//! Instagram's shard-embedded ids.
//!
//! Instagram computes ids inside PostgreSQL: `(now_ms - epoch) << 23 | shard_id << 10 |
//! nextval('table_id_seq') % 1024`, with the logical shard chosen as `user_id % logical_shards`.
//! This module gives the same arithmetic ([`instagram_id`], [`shard_for`], [`shard_of`]) and a
//! generator fed by a per-shard counter ([`ShardCounterGenerator`]).
//!
//! Invariant of the generator, stronger than the SQL original: within one time unit it hands
//! out at most `2^sequence_bits` ids, so `counter % 2^sequence_bits` never repeats inside a unit
//! and ids never collide; the SQL function silently repeats ids past 1024 per millisecond per
//! shard. Like the original, ids are time-ordered across units but not strictly increasing
//! within one (the counter wraps modulo 1024). Time is monotonic, as in the snowflake generator.

use crate::clock::{Clock, SystemClock};
use crate::layout::{ComposeError, DecodeError, Layout};
use crate::snowflake::{AnchoredTime, GeneratorError, NextIdError};
use std::num::NonZeroU64;
use std::sync::Mutex;
use std::time::Duration;

/// The logical shard of `key` among `logical_shards`: `key % logical_shards`.
pub fn shard_for(key: u64, logical_shards: NonZeroU64) -> u64 {
    key % logical_shards.get()
}

/// The shard an id was made on: its node field.
pub fn shard_of(layout: &Layout, id: u64) -> Result<u64, DecodeError> {
    layout.decode(id).map(|d| d.parts.node)
}

/// The id Instagram's PL/pgSQL `next_id()` returns for a wall time, shard and `nextval()`
/// result: the counter is taken modulo `2^sequence_bits`.
pub fn instagram_id(
    layout: &Layout,
    unix_ms: u64,
    shard: u64,
    counter: u64,
) -> Result<u64, ComposeError> {
    layout.compose_at_unix_millis(unix_ms, shard, counter & layout.max_sequence())
}

#[derive(Debug)]
struct CounterState {
    /// Timestamp of the current unit.
    unit: u64,
    /// Ids handed out in the current unit.
    used_in_unit: u64,
    /// The per-shard counter (`nextval()`), never reset.
    counter: u64,
}

/// Ids for one logical shard from a counter, as Instagram's `next_id()` computes them, with the
/// guard described in the module docs. Thread-safe (a short mutex; this is not the lock-free
/// path, the snowflake generator is).
#[derive(Debug)]
pub struct ShardCounterGenerator<C: Clock = SystemClock> {
    layout: Layout,
    shard: u64,
    time: AnchoredTime<C>,
    state: Mutex<CounterState>,
}

impl<C: Clock> ShardCounterGenerator<C> {
    /// A generator for `shard`, its counter starting at `counter_start` (the sequence's current
    /// value).
    pub fn new(
        layout: Layout,
        shard: u64,
        clock: C,
        counter_start: u64,
    ) -> Result<Self, GeneratorError> {
        if shard > layout.max_node() {
            return Err(GeneratorError::NodeOutOfRange {
                node: shard,
                bits: layout.node_bits(),
                max: layout.max_node(),
            });
        }
        let wall = clock.wall_nanos();
        if wall < layout.epoch_nanos() {
            return Err(GeneratorError::BeforeEpoch {
                now_ms: wall / 1_000_000,
                epoch_ms: layout.spec().epoch_unix_ms,
            });
        }
        let time = AnchoredTime::new(clock, layout.epoch_nanos(), layout.epoch_nanos());
        Ok(ShardCounterGenerator {
            layout,
            shard,
            time,
            state: Mutex::new(CounterState {
                unit: 0,
                used_in_unit: 0,
                counter: counter_start,
            }),
        })
    }

    /// The next id for this shard.
    pub fn next_id(&self) -> Result<u64, NextIdError> {
        let now_nanos = self.time.now_nanos();
        let now = (now_nanos - self.layout.epoch_nanos()) / self.layout.unit_nanos();
        if now > self.layout.max_timestamp() {
            return Err(NextIdError::TimeExhausted);
        }
        // The state is plain data; a panic elsewhere cannot leave it inconsistent.
        let mut st = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if now > st.unit {
            st.unit = now;
            st.used_in_unit = 0;
        }
        if st.used_in_unit >= self.layout.ids_per_unit() {
            let wait = self
                .layout
                .unix_nanos_of(st.unit + 1)
                .saturating_sub(now_nanos);
            return Err(NextIdError::SequenceExhausted {
                wait: Duration::from_nanos(wait.max(1)),
            });
        }
        let seq = st.counter & self.layout.max_sequence();
        st.counter = st.counter.wrapping_add(1);
        st.used_in_unit += 1;
        Ok(self.layout.compose_unchecked(st.unit, self.shard, seq))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::clock::ManualClock;
    use std::collections::HashSet;

    #[test]
    fn matches_the_sql_formula() {
        let l = Layout::instagram();
        // The example from Instagram's engineering post: 2011-09-09 ~ ms 1387263000 after epoch,
        // shard 1341, nextval 5001.
        let id = instagram_id(&l, 1_314_220_021_721 + 1_387_263_000, 1341, 5001).unwrap();
        assert_eq!(id, (1_387_263_000u64 << 23) | (1341 << 10) | (5001 % 1024));
        assert_eq!(shard_of(&l, id).unwrap(), 1341);
        assert_eq!(shard_for(31_341, NonZeroU64::new(2000).unwrap()), 1341);
    }

    #[test]
    fn counter_generator_never_repeats_within_a_unit() {
        let clock = ManualClock::at_unix_millis(1_780_000_000_000);
        let l = Layout::instagram();
        let g = ShardCounterGenerator::new(l, 12, clock.clone(), 1000).unwrap();
        let mut seen = HashSet::new();
        for unit in 0..3 {
            for _ in 0..1024 {
                let id = g.next_id().unwrap();
                assert!(seen.insert(id));
                assert_eq!(shard_of(&l, id).unwrap(), 12);
            }
            assert!(
                matches!(g.next_id(), Err(NextIdError::SequenceExhausted { .. })),
                "unit {unit}"
            );
            clock.advance_millis(1);
        }
        // The first id continues the counter exactly as nextval() would: 1000 % 1024.
        assert_eq!(
            seen.iter()
                .map(|id| l.decode(*id).unwrap().parts.sequence)
                .filter(|s| *s == 1000)
                .count(),
            3
        );
    }
}
