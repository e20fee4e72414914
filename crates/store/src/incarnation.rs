//! A store's incarnation: a random identity written once into a store (by `idmint serve --init`
//! on a new deployment, or on the first start of a store that already holds data), never
//! changed, and known to every node that uses the store (its node record holds it; the
//! configuration may name it, `[authority] incarnation`).
//!
//! Why: a store that lost its records (wiped, restored from an empty backup, re-created) or was
//! swapped for another one (a changed `root`, `table`, `prefix` or database) looks exactly like
//! a new, empty store. Starting fresh on it would hand out ids and worker ids that were handed
//! out before. An incarnation tells the two apart: a store that lost its records lost its
//! incarnation with them, and another store has another one.
//!
//! Invariants:
//! - created at most once per store: [`crate::Authority::create_incarnation`] writes only if the
//!   store has none (create-if-absent, atomic in every backend) and returns the one the store
//!   holds, so two nodes racing to create agree on one;
//! - never changed nor removed by idmint (only losing the store's data removes it);
//! - random (128 bits from the operating system's CSPRNG): two stores never share one.

use std::fmt;

/// A store's identity (32 lowercase hex digits). See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Incarnation(String);

/// Why a text is not an incarnation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a store incarnation (32 hexadecimal digits, as `idmint serve --init` prints)"
)]
pub struct BadIncarnation(pub String);

impl Incarnation {
    /// A new random incarnation.
    pub fn random() -> Incarnation {
        use rand::RngCore;
        let mut bytes = [0u8; 16];
        rand::rng().fill_bytes(&mut bytes);
        Incarnation(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// Reads one back: 32 hex digits, either case (stored lowercase).
    pub fn parse(text: &str) -> Result<Incarnation, BadIncarnation> {
        let text = text.trim();
        if text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(Incarnation(text.to_ascii_lowercase()))
        } else {
            Err(BadIncarnation(text.to_owned()))
        }
    }

    /// Its text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for Incarnation {
    type Err = BadIncarnation;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Incarnation::parse(s)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn random_ones_differ_and_round_trip() {
        let a = Incarnation::random();
        let b = Incarnation::random();
        assert_ne!(a, b);
        assert_eq!(Incarnation::parse(a.as_str()).unwrap(), a);
        assert_eq!(
            Incarnation::parse(&a.as_str().to_ascii_uppercase()).unwrap(),
            a
        );
        for bad in ["", "xyz", &a.as_str()[1..], &format!("{a}0")] {
            assert!(Incarnation::parse(bad).is_err(), "{bad}");
        }
    }
}
