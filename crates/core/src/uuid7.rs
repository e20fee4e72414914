//! UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, version 7, a 24-bit counter spread over
//! `rand_a` and the top of `rand_b`, then 50 random bits.
//!
//! The 50 random bits are fresh from the CSPRNG for every id (RFC 9562 asks for unguessable
//! random bits; the counter alone orders ids).
//!
//! Invariant: ids from one [`Uuid7Generator`] strictly increase (as 128-bit integers, as bytes,
//! and as canonical strings), across threads and wall-clock steps; see `mono128`.
//! [`Uuid7`] values are always version 7 with the RFC variant.

use crate::clock::{Clock, CoarseClock};
pub use crate::mono128::ParseIdError;
use crate::mono128::{random_u64, Monotonic128};
use std::fmt;
use std::str::FromStr;

/// A version-7 UUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uuid7(u128);

const RAND_B_RANDOM_BITS: u32 = 50;

impl Uuid7 {
    fn from_parts(unix_ms: u64, counter: u32, random: u64) -> Uuid7 {
        let counter = u128::from(counter);
        let v = (u128::from(unix_ms & 0xFFFF_FFFF_FFFF) << 80)
            | (0x7 << 76)
            | ((counter >> 12) << 64)
            | (0b10 << 62)
            | ((counter & 0xFFF) << RAND_B_RANDOM_BITS)
            | u128::from(random & ((1 << RAND_B_RANDOM_BITS) - 1));
        Uuid7(v)
    }

    /// From 16 big-endian bytes; fails unless version 7 and RFC variant.
    pub fn from_bytes(bytes: [u8; 16]) -> Result<Uuid7, ParseIdError> {
        Self::from_u128(u128::from_be_bytes(bytes))
    }

    /// From a 128-bit integer; fails unless version 7 and RFC variant.
    pub fn from_u128(v: u128) -> Result<Uuid7, ParseIdError> {
        let version = ((v >> 76) & 0xF) as u8;
        if version != 7 {
            return Err(ParseIdError::Version(version));
        }
        if (v >> 62) & 0b11 != 0b10 {
            return Err(ParseIdError::Variant);
        }
        Ok(Uuid7(v))
    }

    /// The 16 bytes, big-endian (the binary form databases store in `uuid`/`BINARY(16)`).
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

impl fmt::Display for Uuid7 {
    /// The canonical form: 36 lowercase characters, `8-4-4-4-12`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let bytes = self.to_bytes();
        let mut out = [0u8; 36];
        let mut j = 0;
        for (i, b) in bytes.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                out[j] = b'-';
                j += 1;
            }
            out[j] = HEX[usize::from(b >> 4)];
            out[j + 1] = HEX[usize::from(b & 0xF)];
            j += 2;
        }
        // Every byte written is ASCII.
        f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

impl FromStr for Uuid7 {
    type Err = ParseIdError;
    /// Parses the canonical hyphenated form (any case) or 32 hex digits without hyphens.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let hyphenated = match s.len() {
            36 => true,
            32 => false,
            len => {
                return Err(ParseIdError::Length {
                    expected: "36 (or 32 without hyphens)",
                    len,
                })
            }
        };
        let mut v: u128 = 0;
        for (position, c) in s.chars().enumerate() {
            if hyphenated && matches!(position, 8 | 13 | 18 | 23) {
                if c != '-' {
                    return Err(ParseIdError::Character { found: c, position });
                }
                continue;
            }
            let digit = c
                .to_digit(16)
                .ok_or(ParseIdError::Character { found: c, position })?;
            v = (v << 4) | u128::from(digit);
        }
        Uuid7::from_u128(v)
    }
}

/// A thread-safe, lock-free, monotonic UUIDv7 generator. The default clock is [`CoarseClock`]
/// (its cached wall reading: one atomic load per id); within a millisecond an id costs one
/// `fetch_add` on the shared state plus 64 bits from the thread's CSPRNG.
#[derive(Debug)]
pub struct Uuid7Generator<C: Clock = CoarseClock> {
    state: Monotonic128<C>,
}

impl<C: Clock> Uuid7Generator<C> {
    /// A generator reading time from `clock`.
    pub fn new(clock: C) -> Self {
        Uuid7Generator {
            state: Monotonic128::new(clock),
        }
    }
    /// The next UUID, greater than every one this generator made before.
    #[inline]
    pub fn next_uuid(&self) -> Uuid7 {
        let (ms, counter, _) = self.state.next();
        Uuid7::from_parts(ms, counter, random_u64())
    }
}

impl Default for Uuid7Generator<CoarseClock> {
    fn default() -> Self {
        Self::new(CoarseClock::new())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn format_parse_round_trip_and_fields() {
        let clock = ManualClock::at_unix_millis(1_780_000_000_123);
        let g = Uuid7Generator::new(clock);
        let u = g.next_uuid();
        let s = u.to_string();
        assert_eq!(s.len(), 36);
        assert_eq!(&s[14..15], "7");
        assert!(matches!(&s[19..20], "8" | "9" | "a" | "b"));
        assert_eq!(s.parse::<Uuid7>().unwrap(), u);
        assert_eq!(s.to_uppercase().parse::<Uuid7>().unwrap(), u);
        assert_eq!(s.replace('-', "").parse::<Uuid7>().unwrap(), u);
        assert_eq!(Uuid7::from_bytes(u.to_bytes()).unwrap(), u);
        assert_eq!(u.unix_millis(), 1_780_000_000_123);
    }

    #[test]
    fn parse_errors_are_precise() {
        assert_eq!(
            "abc".parse::<Uuid7>(),
            Err(ParseIdError::Length {
                expected: "36 (or 32 without hyphens)",
                len: 3
            })
        );
        assert_eq!(
            "0190c3e2-7b1c-7abc-8def-01234567890g".parse::<Uuid7>(),
            Err(ParseIdError::Character {
                found: 'g',
                position: 35
            })
        );
        assert_eq!(
            "0190c3e2-7b1c-4abc-8def-012345678901".parse::<Uuid7>(),
            Err(ParseIdError::Version(4))
        );
        assert_eq!(
            "0190c3e2-7b1c-7abc-cdef-012345678901".parse::<Uuid7>(),
            Err(ParseIdError::Variant)
        );
        assert_eq!(
            "0190c3e2x7b1c-7abc-8def-012345678901".parse::<Uuid7>(),
            Err(ParseIdError::Character {
                found: 'x',
                position: 8
            })
        );
    }

    #[test]
    fn monotonic_across_a_backward_clock_step_and_threads() {
        let clock = ManualClock::at_unix_millis(1_780_000_000_000);
        let g = std::sync::Arc::new(Uuid7Generator::new(clock.clone()));
        let mut prev = g.next_uuid();
        clock.step_wall_millis(-10_000);
        for _ in 0..100_000 {
            let u = g.next_uuid();
            assert!(u > prev && u.to_string() > prev.to_string());
            prev = u;
        }
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || (0..250_000).map(|_| g.next_uuid()).collect::<Vec<_>>())
            })
            .collect();
        let mut all = std::collections::HashSet::new();
        for h in handles {
            let v = h.join().unwrap();
            assert!(v.windows(2).all(|w| w[0] < w[1]));
            all.extend(v);
        }
        assert_eq!(all.len(), 1_000_000);
    }
}
