//! Serde adapters writing integers as decimal strings (`"18446744073709551615"`), the form the
//! API uses for every value that may exceed JavaScript's 2^53. Reading accepts only a string of
//! ASCII digits that fits the type.
//!
//! Use as `#[serde(with = "idmint_api::decimal")]` on a `u64` field, or
//! `#[serde(with = "idmint_api::decimal::option")]` on an `Option<u64>`.

use serde::de::{self, Deserializer, Visitor};
use serde::Serializer;
use std::fmt;

/// Writes `v` as a decimal string.
pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// Reads a decimal string into a `u64`.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_str(DecimalVisitor)
}

struct DecimalVisitor;

impl Visitor<'_> for DecimalVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a 64-bit unsigned integer as a decimal string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(E::invalid_value(de::Unexpected::Str(v), &self));
        }
        v.parse()
            .map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
    }
}

/// The same for `Option<u64>`: `null` or a decimal string.
pub mod option {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `None` as `null`, `Some(v)` as a decimal string.
    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.collect_str(v),
            None => s.serialize_none(),
        }
    }

    /// Reads `null` or a decimal string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        #[derive(Deserialize)]
        struct Wrapped(#[serde(with = "super")] u64);
        Ok(Option::<Wrapped>::deserialize(d)?.map(|w| w.0))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct T {
        #[serde(with = "super")]
        a: u64,
        #[serde(with = "super::option")]
        b: Option<u64>,
    }

    #[test]
    fn round_trips_the_whole_range() {
        for (a, b) in [(0, None), (u64::MAX, Some(u64::MAX)), (1 << 53, Some(7))] {
            let t = T { a, b };
            let text = serde_json::to_string(&t).unwrap();
            assert!(text.contains(&format!("\"{a}\"")));
            assert_eq!(serde_json::from_str::<T>(&text).unwrap(), t);
        }
    }

    #[test]
    fn refuses_what_is_not_a_decimal_string() {
        for bad in [
            r#"{"a":1,"b":null}"#,
            r#"{"a":"-1","b":null}"#,
            r#"{"a":"+1","b":null}"#,
            r#"{"a":"","b":null}"#,
            r#"{"a":"18446744073709551616","b":null}"#,
            r#"{"a":"1","b":2}"#,
        ] {
            assert!(
                serde_json::from_str::<T>(bad).is_err(),
                "{bad} was accepted"
            );
        }
    }
}
