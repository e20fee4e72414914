//! What the Redis authority reads back, validated: a namespace's hash, a script's reply, a
//! field's number. Pure functions over [`redis::Value`]; anything that is not exactly what
//! this version writes is [`StoreError::Corrupt`], never a panic.
//!
//! A namespace is a hash of five fields, each a decimal number without sign or leading zeros:
//!
//! ```text
//! HGETALL {idmint}:ns:photos  →  bits 64 first 1 step 1 offset 0 watermark 1001
//! ```
//!
//! A retired namespace's hash has a sixth field, `retired 1`, set by the script that moves its
//! watermark past the largest id.
//!
//! It is valid when [`ops::stored_state`] accepts it (a spec `SequenceSpec::new` accepts, a
//! watermark in `[first, max_id + 1]`, exactly `max_id + 1` when retired) and has no other
//! field.

use crate::{ops, Incarnation, NamespaceState, StoreError};
use idmint_core::{NamespaceName, Width};
use redis::Value;

/// The namespace hash's fields, in the order the scripts write them.
pub(super) const NS_FIELDS: [&str; 5] = ["bits", "first", "step", "offset", "watermark"];

pub(super) fn corrupt(message: String) -> StoreError {
    StoreError::Corrupt { message }
}

/// A decimal number as this version writes it: digits, no sign, no leading zero.
pub(super) fn number(text: &str) -> Option<u64> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

/// A text reply (a bulk or simple string).
pub(super) fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// An integer reply.
pub(super) fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

/// An array reply's items (an empty one for nil).
pub(super) fn items(value: &Value) -> Option<&[Value]> {
    match value {
        Value::Array(items) | Value::Set(items) => Some(items),
        Value::Nil => Some(&[]),
        _ => None,
    }
}

/// A flat `field value …` reply (`HGETALL`, a stream entry's fields) as text pairs.
pub(super) fn pairs(value: &Value) -> Option<Vec<(String, String)>> {
    let items = items(value)?;
    if !items.len().is_multiple_of(2) {
        return None;
    }
    items
        .chunks(2)
        .map(|pair| Some((text(&pair[0])?, text(&pair[1])?)))
        .collect()
}

/// A namespace's hash (as `HGETALL` pairs), validated.
pub(super) fn namespace(
    name: &NamespaceName,
    fields: &[(String, String)],
) -> Result<NamespaceState, StoreError> {
    let bad = |what: String| corrupt(format!("redis record of namespace {name}: {what}"));
    let retired = match fields.iter().find(|(k, _)| k == RETIRED_FIELD) {
        None => false,
        Some((_, v)) if v == "1" => true,
        Some((_, v)) => return Err(bad(format!("field {RETIRED_FIELD}={v:?} is not 1"))),
    };
    if fields.len() != NS_FIELDS.len() + usize::from(retired) {
        return Err(bad(format!(
            "has fields {:?}, expected {NS_FIELDS:?}",
            fields.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>()
        )));
    }
    let mut values = [0u64; 5];
    for (field, value) in NS_FIELDS.iter().zip(values.iter_mut()) {
        let raw = fields
            .iter()
            .find(|(k, _)| k == field)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| bad(format!("field {field} is missing")))?;
        *value =
            number(raw).ok_or_else(|| bad(format!("field {field}={raw:?} is not a number")))?;
    }
    let [bits, first, step, offset, watermark] = values;
    let width = u32::try_from(bits)
        .ok()
        .and_then(Width::from_bits)
        .ok_or_else(|| bad(format!("width {bits} is neither 32 nor 64")))?;
    ops::stored_state(name.clone(), width, first, step, offset, watermark, retired).map_err(bad)
}

/// The field of a retired namespace's hash (value `1`).
const RETIRED_FIELD: &str = "retired";

/// The retired mark as the advance script compares and writes it: `1` set, empty absent.
pub(super) fn retired_mark(retired: bool) -> &'static str {
    if retired {
        "1"
    } else {
        ""
    }
}

/// A namespace's hash as a reply `value` (empty: absent).
pub(super) fn namespace_reply(
    name: &NamespaceName,
    value: &Value,
) -> Result<Option<NamespaceState>, StoreError> {
    let fields = pairs(value).ok_or_else(|| {
        corrupt(format!(
            "redis record of namespace {name}: not a hash ({value:?})"
        ))
    })?;
    if fields.is_empty() {
        return Ok(None);
    }
    namespace(name, &fields).map(Some)
}

/// The fields of a new namespace's hash, in [`NS_FIELDS`] order.
pub(super) fn namespace_fields(state: &NamespaceState) -> [String; 5] {
    let spec = &state.spec;
    [
        spec.width().bits().to_string(),
        spec.first().to_string(),
        spec.step().to_string(),
        spec.offset().to_string(),
        state.watermark.to_string(),
    ]
}

pub(super) fn incarnation(text: &str) -> Result<Incarnation, StoreError> {
    Incarnation::parse(text).map_err(|e| corrupt(format!("the store's incarnation: {e}")))
}

/// A reply that is not what the script returns: a different version of the script, or a
/// server that is not Redis.
pub(super) fn unexpected(what: &str, value: &Value) -> StoreError {
    corrupt(format!("{what}: unexpected reply {value:?}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use idmint_core::SequenceSpec;

    fn fields(list: [(&str, &str); 5]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn namespaces_round_trip_and_damage_is_corrupt() {
        let name = NamespaceName::new("photos").unwrap();
        let state = NamespaceState {
            name: name.clone(),
            spec: SequenceSpec::new(Width::Bits32, 5, 2, 1).unwrap(),
            watermark: 17,
            retired: false,
        };
        let written: Vec<(String, String)> = NS_FIELDS
            .iter()
            .map(|f| (*f).to_owned())
            .zip(namespace_fields(&state))
            .collect();
        assert_eq!(namespace(&name, &written).unwrap(), state);
        let bad = [
            [
                ("bits", "16"),
                ("first", "1"),
                ("step", "1"),
                ("offset", "0"),
                ("watermark", "1"),
            ],
            [
                ("bits", "64"),
                ("first", "1"),
                ("step", "0"),
                ("offset", "0"),
                ("watermark", "1"),
            ],
            [
                ("bits", "64"),
                ("first", "1"),
                ("step", "1"),
                ("offset", "0"),
                ("watermark", "0"),
            ],
            [
                ("bits", "64"),
                ("first", "1"),
                ("step", "1"),
                ("offset", "0"),
                ("watermark", "05"),
            ],
            [
                ("bits", "64"),
                ("first", "1"),
                ("step", "1"),
                ("offset", "0"),
                ("watermark", "+5"),
            ],
            [
                ("bits", "64"),
                ("first", "1"),
                ("step", "1"),
                ("offset", "0"),
                ("extra", "5"),
            ],
            [
                ("bits", "32"),
                ("first", "1"),
                ("step", "1"),
                ("offset", "0"),
                ("watermark", "2147483649"),
            ],
        ];
        for record in bad {
            assert!(
                matches!(
                    namespace(&name, &fields(record)),
                    Err(StoreError::Corrupt { .. })
                ),
                "{record:?} was accepted"
            );
        }
        let mut retired = written.clone();
        retired[4].1 = "2147483648".into();
        retired.push(("retired".into(), "1".into()));
        assert_eq!(
            namespace(&name, &retired).unwrap(),
            NamespaceState {
                watermark: 1 << 31,
                retired: true,
                ..state
            }
        );
        let mut below = written.clone();
        below.push(("retired".into(), "1".into()));
        let mut not_one = retired.clone();
        not_one[5].1 = "0".into();
        for record in [below, not_one] {
            assert!(
                matches!(namespace(&name, &record), Err(StoreError::Corrupt { .. })),
                "{record:?} was accepted"
            );
        }
    }

    #[test]
    fn numbers_are_canonical() {
        assert_eq!(number("0"), Some(0));
        assert_eq!(number("18446744073709551615"), Some(u64::MAX));
        for bad in ["", "01", "-1", "+1", "1.0", "18446744073709551616", " 1"] {
            assert_eq!(number(bad), None, "{bad:?}");
        }
    }
}
