//! The answers of the forward-only administration routes (docs/api.md, "Administration"):
//! `POST /v1/admin/rebase/{namespace}?above=N` and `POST /v1/admin/retire/{namespace}`.

use serde::{Deserialize, Serialize};

/// What a rebase or retirement did to a sequence namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdvanceResponse {
    /// The namespace.
    pub namespace: String,
    /// `rebase` or `retire`.
    pub action: String,
    /// The watermark before (the highest a member had, with several).
    #[serde(with = "crate::decimal")]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = String, format = "uint64", pattern = "^[0-9]{1,20}$")
    )]
    pub previous_watermark: u64,
    /// The watermark now: no id below it is handed out from now on. Unchanged when it was
    /// already at or above the target (the call can be repeated).
    #[serde(with = "crate::decimal")]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = String, format = "uint64", pattern = "^[0-9]{1,20}$")
    )]
    pub watermark: u64,
    /// Ids this node held buffered below the new watermark, burned (never handed out).
    pub burned: u64,
    /// Whether the namespace hands out no id any more (its watermark is past its largest id).
    pub retired: bool,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn watermarks_are_decimal_text() {
        let a = AdvanceResponse {
            namespace: "orders".into(),
            action: "rebase".into(),
            previous_watermark: 101,
            watermark: u64::MAX,
            burned: 3,
            retired: false,
        };
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["watermark"], "18446744073709551615");
        assert_eq!(json["previous_watermark"], "101");
        assert_eq!(serde_json::from_value::<AdvanceResponse>(json).unwrap(), a);
    }
}
