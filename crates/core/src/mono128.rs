//! The shared monotonic state of the 128-bit generators (UUIDv7 and ULID).
//!
//! RFC 9562 §6.2 method 1 ("fixed bit-length dedicated counter"): each id carries the Unix
//! millisecond and a 24-bit counter. The counter starts at a random 23-bit value (top bit 0,
//! leaving room to count) in each new millisecond and increases by one per id within it; if it
//! overflows, the carry moves the timestamp one millisecond ahead, as the RFC allows.
//!
//! Invariant: `(millisecond, counter)` pairs returned by one [`Monotonic128`] strictly increase,
//! from any thread, whatever the wall clock does: the state is one `AtomicU64` holding
//! `(ms - base) << 24 | counter`, advanced only by compare-and-swap to a larger value. The
//! millisecond offset has 40 bits: a process may run 34 years.

use crate::clock::Clock;
use crate::sync::{AtomicU64, Ordering};
use rand::RngCore;

const COUNTER_BITS: u32 = 24;
const COUNTER_SEED_MASK: u64 = (1 << (COUNTER_BITS - 1)) - 1;

#[derive(Debug)]
pub(crate) struct Monotonic128<C> {
    clock: C,
    base_ms: u64,
    state: AtomicU64,
}

impl<C: Clock> Monotonic128<C> {
    pub(crate) fn new(clock: C) -> Self {
        let base_ms = clock.wall_nanos() / 1_000_000;
        Monotonic128 {
            clock,
            base_ms,
            state: AtomicU64::new(0),
        }
    }

    /// The next `(unix_ms, counter, first_of_its_ms)`; `counter` has 24 significant bits, and
    /// `first_of_its_ms` tells the caller that this call moved the state into a new millisecond.
    #[inline]
    pub(crate) fn next(&self) -> (u64, u32, bool) {
        // The coarse wall reading may lag by the clock's tick; ids then carry a slightly older
        // millisecond, and the state still only moves forward.
        let now_rel = (self.clock.coarse_wall_nanos() / 1_000_000).saturating_sub(self.base_ms);
        let mut last = self.state.load(Ordering::Relaxed);
        loop {
            let new_ms = now_rel > last >> COUNTER_BITS;
            let next = if new_ms {
                (now_rel << COUNTER_BITS) | (rand::rng().next_u64() & COUNTER_SEED_MASK)
            } else {
                last + 1
            };
            match self
                .state
                .compare_exchange_weak(last, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    let ms = self.base_ms + (next >> COUNTER_BITS);
                    return (ms, (next & ((1 << COUNTER_BITS) - 1)) as u32, new_ms);
                }
                Err(actual) => last = actual,
            }
        }
    }
}

/// 64 random bits from the thread's CSPRNG (ChaCha, reseeded from the OS).
#[inline]
pub(crate) fn random_u64() -> u64 {
    rand::rng().next_u64()
}

/// Errors parsing a 128-bit id from text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseIdError {
    /// Wrong number of characters.
    #[error("expected {expected}, got {len} characters")]
    Length {
        /// What the format expects.
        expected: &'static str,
        /// The length found.
        len: usize,
    },
    /// A character that is not part of the format.
    #[error("invalid character {found:?} at position {position}")]
    Character {
        /// The character.
        found: char,
        /// Its position (0-based).
        position: usize,
    },
    /// A ULID above the 128-bit maximum (first character above '7').
    #[error("ULID overflows 128 bits: its first character must be 0-7")]
    Overflow,
    /// A UUID of another version.
    #[error("UUID version is {0}, not 7")]
    Version(u8),
    /// A UUID of another variant.
    #[error("UUID variant is not RFC 9562 (10xx)")]
    Variant,
}
