//! [`Id`]: one id as the client hands it out, and [`Kind`]: what a namespace hands out.

use idmint_core::{Ulid, Uuid7};
use std::fmt;

/// What a namespace hands out (docs/design.md, "kind").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// Integers from leased blocks.
    Sequence,
    /// Time-ordered 64-bit ids.
    Snowflake,
    /// Time-ordered 128-bit UUIDs (RFC 9562 version 7).
    Uuid7,
    /// Time-ordered 128-bit ULIDs.
    Ulid,
}

impl Kind {
    /// Whether ids of this kind carry the time they were made (and so are cached only for the
    /// validity limit).
    pub fn is_time_ordered(self) -> bool {
        !matches!(self, Kind::Sequence)
    }

    /// Lower-case name, as in the node's configuration.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Sequence => "sequence",
            Kind::Snowflake => "snowflake",
            Kind::Uuid7 => "uuid7",
            Kind::Ulid => "ulid",
        }
    }
}

/// One id. Displayed as the node's API writes it: decimal, UUID text, or ULID text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Id {
    /// A sequence id.
    Sequence(u64),
    /// A snowflake id.
    Snowflake(u64),
    /// A UUIDv7.
    Uuid7(Uuid7),
    /// A ULID.
    Ulid(Ulid),
}

impl Id {
    /// The id as an integer, for sequence and snowflake ids.
    pub fn as_u64(self) -> Option<u64> {
        match self {
            Id::Sequence(v) | Id::Snowflake(v) => Some(v),
            Id::Uuid7(_) | Id::Ulid(_) => None,
        }
    }

    /// The id's 128 bits (a 64-bit id widened): ids of one namespace compare as these do.
    pub fn as_u128(self) -> u128 {
        match self {
            Id::Sequence(v) | Id::Snowflake(v) => u128::from(v),
            Id::Uuid7(u) => u.as_u128(),
            Id::Ulid(u) => u.as_u128(),
        }
    }

    /// The kind of namespace it came from.
    pub fn kind(self) -> Kind {
        match self {
            Id::Sequence(_) => Kind::Sequence,
            Id::Snowflake(_) => Kind::Snowflake,
            Id::Uuid7(_) => Kind::Uuid7,
            Id::Ulid(_) => Kind::Ulid,
        }
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Sequence(v) | Id::Snowflake(v) => write!(f, "{v}"),
            Id::Uuid7(u) => write!(f, "{u}"),
            Id::Ulid(u) => write!(f, "{u}"),
        }
    }
}
