//! Answers that hand out ids: `GET /v1/ids/{namespace}` and `POST /v1/blocks/{namespace}`.

use serde::{Deserialize, Serialize};

/// `GET /v1/ids/{namespace}?count=N`: `{"namespace": "photos", "ids": ["1", "2"]}`.
///
/// Ids are strictly increasing within one answer. They are text: decimal for 64-bit kinds
/// (sequence, snowflake), canonical UUID text for `uuid7` (`0190…-7…`), 26-character Crockford
/// base32 for `ulid`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IdsResponse {
    /// The namespace the ids belong to.
    pub namespace: String,
    /// The ids, in increasing order.
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = Vec<crate::schema::IdText>, inline)
    )]
    pub ids: Vec<String>,
}

/// `POST /v1/blocks/{namespace}?count=N` (sequence namespaces only): the half-open range
/// `[start, end)` with `step`, every id `start + k·step` below `end` now the caller's alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BlockResponse {
    /// First id of the block.
    #[serde(with = "crate::decimal")]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = String, format = "uint64", pattern = "^[0-9]{1,20}$")
    )]
    pub start: u64,
    /// One step past the last id (exclusive end).
    #[serde(with = "crate::decimal")]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = String, format = "uint64", pattern = "^[0-9]{1,20}$")
    )]
    pub end: u64,
    /// Distance between consecutive ids (the namespace's step).
    pub step: u64,
    /// What hands the block's unused tail back (`POST /v1/blocks/{namespace}/give-back`, gRPC
    /// `GiveBack`): a random number the node chose, `"0"` when the tail can never go back
    /// (cache `off`). Absent from answers of older nodes.
    #[serde(with = "crate::decimal", default)]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = String, format = "uint64", pattern = "^[0-9]{1,20}$")
    )]
    pub lease: u64,
    /// The first id the lease covers: `start`, or the start of the lease it extended
    /// (`extends=`); a tail handed back may start at any of the lease's ids from here. Absent
    /// or `"0"` from older nodes: read it as `start`.
    #[serde(with = "crate::decimal", default)]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = String, format = "uint64", pattern = "^[0-9]{1,20}$")
    )]
    pub lease_start: u64,
}

/// `POST /v1/blocks/{namespace}/give-back`: what became of a leased block's unused tail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GiveBackResponse {
    /// Whether the ids are back in front of the node's buffer (handed out next).
    pub given_back: bool,
    /// How many ids went back.
    pub ids: u64,
    /// Why not, when not: the tail is then burned (never handed out again).
    pub reason: String,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn block_is_decimal_text() {
        let b = BlockResponse {
            start: 1,
            end: u64::MAX,
            step: 2,
            lease: 7,
            lease_start: 1,
        };
        let text = serde_json::to_string(&b).unwrap();
        assert_eq!(
            text,
            r#"{"start":"1","end":"18446744073709551615","step":2,"lease":"7","lease_start":"1"}"#
        );
        assert_eq!(serde_json::from_str::<BlockResponse>(&text).unwrap(), b);
    }
}
