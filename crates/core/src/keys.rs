//! Routing a row from its key alone: composite keys, residue classes, and (re-exported from
//! [`crate::instagram`]) the shard an Instagram-layout id names and the shard a key hashes to.
//!
//! - [`CompositeKey`]: a `(shard, local)` pair written `shard-local` (`42-1007`). Its text form
//!   is canonical: both parts are decimal `u64` without sign or leading zero (`0` itself is
//!   allowed), so one key has exactly one text and a text column compares as the pair does
//!   for equality. Parsing refuses anything else, naming the part at fault.
//! - [`residue_of`] and [`member_of`]: an id of a `step`/`offset` sequence, or of a `multi`
//!   authority (member `k` owns the residue class `offset_k` modulo `step`), names its issuer
//!   by `id % step`. Members are numbered from 1 in configuration order, as
//!   `idmint admin reseed --member` numbers them.
//! - [`shard_for`] (`key % shards`) and [`shard_of`] (an id's node field).

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use thiserror::Error;

pub use crate::instagram::{shard_for, shard_of};

/// The residue class of `id` modulo `step`: the offset of the sequence (or multi member) that
/// can have issued it.
pub fn residue_of(id: u64, step: NonZeroU64) -> u64 {
    id % step.get()
}

/// The number (from 1, in the order given) of the member whose offset is `id`'s residue class
/// modulo `step`; `None` when no offset matches (an offset at or above `step` never does).
/// With repeated offsets the first one is named.
pub fn member_of(id: u64, step: NonZeroU64, offsets: &[u64]) -> Option<usize> {
    let residue = residue_of(id, step);
    offsets
        .iter()
        .position(|o| *o == residue)
        .map(|index| index + 1)
}

/// A key made of the shard that holds a row and the row's id within that shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CompositeKey {
    /// The shard.
    pub shard: u64,
    /// The id within the shard.
    pub local: u64,
}

impl CompositeKey {
    /// The key of row `local` on `shard`.
    pub fn new(shard: u64, local: u64) -> Self {
        CompositeKey { shard, local }
    }
}

impl fmt::Display for CompositeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.shard, self.local)
    }
}

/// Which half of a composite key's text is at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPart {
    /// The shard, before the `-`.
    Shard,
    /// The id within the shard, after the `-`.
    Local,
}

impl fmt::Display for KeyPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyPart::Shard => "shard",
            KeyPart::Local => "local id",
        })
    }
}

/// Why a text is not a composite key.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CompositeKeyError {
    /// No `-` between the two parts.
    #[error("{text:?} is not a composite key: expected SHARD-LOCAL, e.g. 42-1007")]
    NoSeparator {
        /// The text given.
        text: String,
    },
    /// A part is empty (`-7`, `42-`: a sign is not allowed either).
    #[error("{text:?} is not a composite key: the {part} is empty")]
    Empty {
        /// The text given.
        text: String,
        /// The part at fault.
        part: KeyPart,
    },
    /// A part holds something other than ASCII digits (a sign, a space, a second `-`).
    #[error("{text:?} is not a composite key: the {part} is not a decimal number")]
    NotDecimal {
        /// The text given.
        text: String,
        /// The part at fault.
        part: KeyPart,
    },
    /// A part has a leading zero: the text would not be the key's only form.
    #[error("{text:?} is not a composite key: the {part} has a leading zero")]
    LeadingZero {
        /// The text given.
        text: String,
        /// The part at fault.
        part: KeyPart,
    },
    /// A part does not fit 64 bits.
    #[error("{text:?} is not a composite key: the {part} is above 18446744073709551615")]
    Overflow {
        /// The text given.
        text: String,
        /// The part at fault.
        part: KeyPart,
    },
}

fn parse_part(text: &str, digits: &str, part: KeyPart) -> Result<u64, CompositeKeyError> {
    let text = || text.to_owned();
    if digits.is_empty() {
        return Err(CompositeKeyError::Empty { text: text(), part });
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CompositeKeyError::NotDecimal { text: text(), part });
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return Err(CompositeKeyError::LeadingZero { text: text(), part });
    }
    digits
        .parse()
        .map_err(|_| CompositeKeyError::Overflow { text: text(), part })
}

impl FromStr for CompositeKey {
    type Err = CompositeKeyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (shard, local) =
            text.split_once('-')
                .ok_or_else(|| CompositeKeyError::NoSeparator {
                    text: text.to_owned(),
                })?;
        Ok(CompositeKey {
            shard: parse_part(text, shard, KeyPart::Shard)?,
            local: parse_part(text, local, KeyPart::Local)?,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn step(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).unwrap()
    }

    #[test]
    fn composite_text_round_trips() {
        for key in [
            CompositeKey::new(42, 1007),
            CompositeKey::new(0, 0),
            CompositeKey::new(u64::MAX, u64::MAX),
        ] {
            assert_eq!(key.to_string().parse::<CompositeKey>().unwrap(), key);
        }
        assert_eq!(CompositeKey::new(42, 1007).to_string(), "42-1007");
        assert_eq!(
            "18446744073709551615-0".parse::<CompositeKey>().unwrap(),
            CompositeKey::new(u64::MAX, 0)
        );
    }

    #[test]
    fn composite_refusals_name_the_part() {
        use CompositeKeyError as E;
        use KeyPart::{Local, Shard};
        let err = |t: &str| t.parse::<CompositeKey>().unwrap_err();
        assert!(matches!(err("42"), E::NoSeparator { .. }));
        assert!(matches!(err(""), E::NoSeparator { .. }));
        assert!(matches!(err("-7"), E::Empty { part: Shard, .. }));
        assert!(matches!(err("42-"), E::Empty { part: Local, .. }));
        assert!(matches!(err("-"), E::Empty { part: Shard, .. }));
        assert!(matches!(err("+4-2"), E::NotDecimal { part: Shard, .. }));
        assert!(matches!(err("4-+2"), E::NotDecimal { part: Local, .. }));
        assert!(matches!(err("4--2"), E::NotDecimal { part: Local, .. }));
        assert!(matches!(err("1-2-3"), E::NotDecimal { part: Local, .. }));
        assert!(matches!(err(" 4-2"), E::NotDecimal { part: Shard, .. }));
        assert!(matches!(err("4-2 "), E::NotDecimal { part: Local, .. }));
        assert!(matches!(err("04-2"), E::LeadingZero { part: Shard, .. }));
        assert!(matches!(err("4-00"), E::LeadingZero { part: Local, .. }));
        assert!(matches!(
            err("18446744073709551616-1"),
            E::Overflow { part: Shard, .. }
        ));
        assert!(matches!(
            err("1-99999999999999999999"),
            E::Overflow { part: Local, .. }
        ));
        assert_eq!(
            err("42-x").to_string(),
            "\"42-x\" is not a composite key: the local id is not a decimal number"
        );
    }

    #[test]
    fn the_residue_class_names_the_member() {
        // Three members stepping by 4, owning 1, 2 and 3 (0 unowned), in config order.
        let offsets = [3, 1, 2];
        assert_eq!(residue_of(13, step(4)), 1);
        assert_eq!(member_of(13, step(4), &offsets), Some(2));
        assert_eq!(member_of(15, step(4), &offsets), Some(1));
        assert_eq!(member_of(14, step(4), &offsets), Some(3));
        assert_eq!(member_of(16, step(4), &offsets), None);
        assert_eq!(member_of(u64::MAX, step(4), &offsets), Some(1));
        // An offset at or above the step matches no id.
        assert_eq!(member_of(5, step(4), &[5, 1]), Some(2));
        assert_eq!(residue_of(7, step(1)), 0);
    }

    #[test]
    fn routing_helpers_agree_with_the_layout() {
        let l = crate::Layout::instagram();
        let id = crate::instagram::instagram_id(&l, 1_400_000_000_000, 1341, 7).unwrap();
        assert_eq!(shard_of(&l, id).unwrap(), 1341);
        assert_eq!(shard_for(31_341, step(2000)), 1341);
    }
}
