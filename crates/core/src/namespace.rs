//! Namespace names.
//!
//! A [`NamespaceName`] is 1 to 128 characters of ASCII letters, digits, `_`, `-`, `.` and `:`,
//! starting with a letter or digit (`photos`, `users.names`, `shard-07`, `counter:orders`). The
//! rule keeps names safe without escaping in URL path segments, SQL string literals, etcd keys,
//! znode names and Prometheus label values; table names derived from a name are sanitised and
//! hashed where they need to be plain identifiers. `:` is there for the Redis habit of
//! `object:field` keys (`redis-benchmark -t incr` uses `counter:__rand_int__`).
//! A value of this type is always valid.

use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// Longest namespace name accepted.
pub const MAX_NAMESPACE_LEN: usize = 128;

/// A validated namespace name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NamespaceName(String);

/// Why a string is not a namespace name.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum NamespaceNameError {
    /// The name was empty.
    #[error("namespace name is empty")]
    Empty,
    /// The name was longer than [`MAX_NAMESPACE_LEN`].
    #[error("namespace name is {len} characters long; the maximum is {MAX_NAMESPACE_LEN}")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// A character outside the allowed set.
    #[error("namespace name has {found:?} at position {position}; allowed are ASCII letters, digits, '_', '-', '.' and ':', starting with a letter or digit")]
    BadCharacter {
        /// The character found.
        found: char,
        /// Its position (0-based, in characters).
        position: usize,
    },
}

impl NamespaceName {
    /// Validates `name`.
    pub fn new(name: &str) -> Result<Self, NamespaceNameError> {
        if name.is_empty() {
            return Err(NamespaceNameError::Empty);
        }
        if name.len() > MAX_NAMESPACE_LEN {
            return Err(NamespaceNameError::TooLong {
                len: name.chars().count(),
            });
        }
        for (position, found) in name.chars().enumerate() {
            let ok = found.is_ascii_alphanumeric()
                || (position > 0 && matches!(found, '_' | '-' | '.' | ':'));
            if !ok {
                return Err(NamespaceNameError::BadCharacter { found, position });
            }
        }
        Ok(NamespaceName(name.to_owned()))
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NamespaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for NamespaceName {
    type Err = NamespaceNameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NamespaceName::new(s)
    }
}

impl AsRef<str> for NamespaceName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_and_rejects() {
        for ok in [
            "photos",
            "users.names",
            "a",
            "shard-07",
            "A_b",
            "counter:__rand_int__",
        ] {
            assert!(NamespaceName::new(ok).is_ok(), "{ok}");
        }
        assert_eq!(NamespaceName::new(""), Err(NamespaceNameError::Empty));
        assert_eq!(
            NamespaceName::new("-x"),
            Err(NamespaceNameError::BadCharacter {
                found: '-',
                position: 0
            })
        );
        for bad in [
            "a/b", "a b", "a%b", "a?b", "a#b", "a'b", "a\\b", "a\"b", "a*b",
        ] {
            assert!(
                matches!(
                    NamespaceName::new(bad),
                    Err(NamespaceNameError::BadCharacter { position: 1, .. })
                ),
                "{bad}"
            );
        }
        assert_eq!(
            NamespaceName::new(":x"),
            Err(NamespaceNameError::BadCharacter {
                found: ':',
                position: 0
            })
        );
        assert!(matches!(
            NamespaceName::new(&"a".repeat(129)),
            Err(NamespaceNameError::TooLong { len: 129 })
        ));
    }
}
