//! The shared monotonic state of the 128-bit generators (UUIDv7 and ULID).
//!
//! RFC 9562 §6.2 method 1 ("fixed bit-length dedicated counter"): each id carries the Unix
//! millisecond and a 24-bit counter. The counter starts at a random 23-bit value (top bit 0,
//! leaving room to count) in each new millisecond and increases by one per id within it; if it
//! overflows, the carry moves the timestamp one millisecond ahead, as the RFC allows.
//!
//! Invariant: `(millisecond, counter)` pairs returned by one [`Monotonic128`] strictly increase,
//! from any thread, whatever the wall clock does: the state is one `AtomicU64` holding
//! `(ms - base) << 24 | counter`, advanced only by read-modify-writes that store a larger value
//! (`fetch_add(1)` within a millisecond, compare-and-swap to a fresh seed for a new one), and each
//! pair returned is the value one of them stored. The
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
    ///
    /// Within a millisecond the state advances by `fetch_add(1)`, which never fails, so threads
    /// sharing the generator do not retry each other's compare-and-swap; only the move into a new
    /// millisecond (re-seeding the counter) is a compare-and-swap. Every value returned is the
    /// value one read-modify-write stored, and every such write stores more than the value it
    /// replaced, so values follow the state's modification order: strictly increasing, unique,
    /// and increasing across threads for calls ordered by happens-before. A `fetch_add` that
    /// finds the state behind the clock's millisecond spends one counter value nobody receives.
    #[inline]
    pub(crate) fn next(&self) -> (u64, u32, bool) {
        // The coarse wall reading may lag by the clock's tick; ids then carry a slightly older
        // millisecond, and the state still only moves forward.
        let now_rel = (self.clock.coarse_wall_nanos() / 1_000_000).saturating_sub(self.base_ms);
        let next = self.state.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
        if next >> COUNTER_BITS >= now_rel {
            return self.parts(next, false);
        }
        self.next_millisecond(next, now_rel)
    }

    /// Moves the state from `seen` into millisecond `now_rel` with a fresh counter seed, unless
    /// another thread moved it first.
    #[cold]
    #[inline(never)]
    fn next_millisecond(&self, mut seen: u64, now_rel: u64) -> (u64, u32, bool) {
        loop {
            let seeded = (now_rel << COUNTER_BITS) | (rand::rng().next_u64() & COUNTER_SEED_MASK);
            match self.state.compare_exchange_weak(
                seen,
                seeded,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return self.parts(seeded, true),
                Err(actual) if actual >> COUNTER_BITS >= now_rel => {
                    // Another thread moved it into this millisecond (or later): count on.
                    let next = self.state.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
                    return self.parts(next, false);
                }
                Err(actual) => seen = actual,
            }
        }
    }

    #[inline(always)]
    fn parts(&self, state: u64, first_of_ms: bool) -> (u64, u32, bool) {
        let ms = self.base_ms + (state >> COUNTER_BITS);
        (ms, (state & ((1 << COUNTER_BITS) - 1)) as u32, first_of_ms)
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
