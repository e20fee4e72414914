//! ULID: 48 bits of Unix milliseconds and 80 bits of randomness, written as 26 characters of
//! Crockford base32. idmint's monotonic ULIDs spend the top 24 of the 80 bits on the counter of
//! `mono128` (seeded randomly each millisecond) and fill the other 56 with randomness drawn once
//! per millisecond. That is the ULID specification's monotonic method (random once per
//! millisecond, then increment) with the increment placed above 56 random bits.
//!
//! Invariant: ids from one [`UlidGenerator`] strictly increase (as integers, bytes and strings),
//! across threads and wall-clock steps. Parsing is case-insensitive and rejects the letters
//! Crockford's alphabet leaves out (I, L, O, U) with the position of the offending character.

use crate::clock::{Clock, CoarseClock};
pub use crate::mono128::ParseIdError;
use crate::mono128::{random_u64, Monotonic128};
use crate::sync::{AtomicU64, Ordering};
use std::fmt;
use std::str::FromStr;

const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A ULID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ulid(u128);

impl Ulid {
    /// From a 128-bit integer (every value is a valid ULID).
    pub fn from_u128(v: u128) -> Ulid {
        Ulid(v)
    }
    /// From 16 big-endian bytes.
    pub fn from_bytes(bytes: [u8; 16]) -> Ulid {
        Ulid(u128::from_be_bytes(bytes))
    }
    /// The 16 bytes, big-endian.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }
    /// As a 128-bit integer.
    pub fn as_u128(self) -> u128 {
        self.0
    }
    /// The Unix millisecond it was made in.
    pub fn unix_millis(self) -> u64 {
        (self.0 >> 80) as u64
    }
    /// [`Self::unix_millis`] as RFC 3339 (UTC, milliseconds); `None` past the year 9999, which
    /// 48 bits of milliseconds reach (see [`crate::layout::rfc3339_millis`]).
    pub fn rfc3339(self) -> Option<String> {
        crate::layout::rfc3339_millis(self.unix_millis())
    }
}

impl fmt::Display for Ulid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = [0u8; 26];
        for (i, c) in out.iter_mut().enumerate() {
            let shift = 5 * (25 - i);
            *c = ALPHABET[((self.0 >> shift) & 0x1F) as usize];
        }
        f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

fn decode_char(c: char) -> Option<u128> {
    let u = c.to_ascii_uppercase();
    ALPHABET
        .iter()
        .position(|&a| char::from(a) == u)
        .map(|p| p as u128)
}

impl FromStr for Ulid {
    type Err = ParseIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 26 {
            return Err(ParseIdError::Length {
                expected: "26",
                len: s.chars().count(),
            });
        }
        let mut v: u128 = 0;
        for (position, c) in s.chars().enumerate() {
            let d = decode_char(c).ok_or(ParseIdError::Character { found: c, position })?;
            if position == 0 && d > 7 {
                return Err(ParseIdError::Overflow);
            }
            v = (v << 5) | d;
        }
        Ok(Ulid(v))
    }
}

/// A thread-safe, lock-free, monotonic ULID generator. The default clock is [`CoarseClock`]
/// (its cached wall reading: one atomic load per id); within a millisecond an id costs one
/// `fetch_add` on the shared state, so threads never retry each other's compare-and-swap.
#[derive(Debug)]
pub struct UlidGenerator<C: Clock = CoarseClock> {
    state: Monotonic128<C>,
    /// The 56 random low bits of the current millisecond.
    tail: AtomicU64,
}

impl<C: Clock> UlidGenerator<C> {
    /// A generator reading time from `clock`.
    pub fn new(clock: C) -> Self {
        UlidGenerator {
            state: Monotonic128::new(clock),
            tail: AtomicU64::new(random_u64()),
        }
    }
    /// The next ULID, greater than every one this generator made before.
    #[inline]
    pub fn next_ulid(&self) -> Ulid {
        let (ms, counter, first_of_ms) = self.state.next();
        // Only randomness rides on the tail: order and uniqueness come from (ms, counter), so a
        // thread that reads the previous millisecond's tail in a race is harmless.
        let tail = if first_of_ms {
            let fresh = random_u64();
            self.tail.store(fresh, Ordering::Relaxed);
            fresh
        } else {
            self.tail.load(Ordering::Relaxed)
        };
        let v = (u128::from(ms & 0xFFFF_FFFF_FFFF) << 80)
            | (u128::from(counter) << 56)
            | u128::from(tail & ((1 << 56) - 1));
        Ulid(v)
    }
}

impl Default for UlidGenerator<CoarseClock> {
    fn default() -> Self {
        Self::new(CoarseClock::new())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::clock::{CoarseClock, ManualClock};

    #[test]
    fn known_value_and_round_trip() {
        // The spec's maximum.
        assert_eq!(Ulid(u128::MAX).to_string(), "7ZZZZZZZZZZZZZZZZZZZZZZZZZ");
        assert_eq!(
            "7ZZZZZZZZZZZZZZZZZZZZZZZZZ".parse::<Ulid>().unwrap(),
            Ulid(u128::MAX)
        );
        assert_eq!(Ulid(0).to_string(), "00000000000000000000000000");
        let g = UlidGenerator::new(ManualClock::at_unix_millis(1_469_918_176_385));
        let u = g.next_ulid();
        // The spec's example timestamp encodes as 01ARYZ6S41.
        assert!(u.to_string().starts_with("01ARYZ6S41"), "{u}");
        assert_eq!(u.to_string().to_lowercase().parse::<Ulid>().unwrap(), u);
        assert_eq!(Ulid::from_bytes(u.to_bytes()), u);
        assert_eq!(u.unix_millis(), 1_469_918_176_385);
    }

    #[test]
    fn parse_errors_are_precise() {
        assert_eq!(
            "8ZZZZZZZZZZZZZZZZZZZZZZZZZ".parse::<Ulid>(),
            Err(ParseIdError::Overflow)
        );
        assert_eq!(
            "01ARYZ6S41TSV4RRFFQ69G5FAU".parse::<Ulid>(),
            Err(ParseIdError::Character {
                found: 'U',
                position: 25
            })
        );
        assert!(matches!(
            "01ARYZ".parse::<Ulid>(),
            Err(ParseIdError::Length { len: 6, .. })
        ));
    }

    #[test]
    fn monotonic_within_a_millisecond_and_across_threads() {
        let clock = ManualClock::at_unix_millis(1_780_000_000_000);
        let g = std::sync::Arc::new(UlidGenerator::new(clock));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || (0..250_000).map(|_| g.next_ulid()).collect::<Vec<_>>())
            })
            .collect();
        let mut all = std::collections::HashSet::new();
        for h in handles {
            let v = h.join().unwrap();
            assert!(v
                .windows(2)
                .all(|w| w[0] < w[1] && w[0].to_string() < w[1].to_string()));
            all.extend(v);
        }
        // One million ids in one frozen millisecond: the counter carried into later ms.
        assert_eq!(all.len(), 1_000_000);
    }

    /// A coarse wall reading that lags (here: frozen a millisecond behind) neither breaks the
    /// order nor stamps ids after the precise clock; a new millisecond re-seeds the counter.
    #[test]
    fn a_lagging_coarse_wall_keeps_order_and_never_runs_ahead() {
        struct Lagging(ManualClock);
        impl Clock for Lagging {
            fn wall_nanos(&self) -> u64 {
                self.0.wall_nanos()
            }
            fn monotonic_nanos(&self) -> u64 {
                self.0.monotonic_nanos()
            }
            fn coarse_wall_nanos(&self) -> u64 {
                self.0.wall_nanos().saturating_sub(1_000_000)
            }
        }
        let precise = ManualClock::at_unix_millis(1_780_000_000_000);
        let g = UlidGenerator::new(Lagging(precise.clone()));
        let mut last = g.next_ulid();
        for step in 0..2_000u64 {
            if step % 100 == 0 {
                precise.advance_millis(1);
            }
            let u = g.next_ulid();
            assert!(u > last, "{u} after {last}");
            assert!(u.unix_millis() <= precise.wall_nanos() / 1_000_000);
            last = u;
        }
        assert_eq!(last.unix_millis(), 1_780_000_000_000 + 19);
    }

    /// Two threads on the default clock (CoarseClock): strictly increasing per thread, unique
    /// overall, never after the precise clock.
    #[test]
    fn default_generator_under_two_threads() {
        let g = std::sync::Arc::new(UlidGenerator::default());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || (0..200_000).map(|_| g.next_ulid()).collect::<Vec<_>>())
            })
            .collect();
        let mut all = std::collections::HashSet::new();
        for h in handles {
            let v = h.join().unwrap();
            assert!(v.windows(2).all(|w| w[0] < w[1]));
            all.extend(v);
        }
        assert_eq!(all.len(), 400_000);
        let now_ms = CoarseClock::new().wall_nanos() / 1_000_000;
        assert!(all.iter().all(|u| u.unix_millis() <= now_ms));
    }
}
