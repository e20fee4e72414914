//! OpenAPI schemas (feature `openapi`) of what `#[derive(utoipa::ToSchema)]` cannot describe
//! from the type alone. Every other wire type derives its schema beside its serde attributes,
//! so the schema and the JSON change together.
//!
//! Invariant: each schema here says what the JSON really is. [`ErrorCode`] is a string, one of
//! [`ErrorCode::SENT`] (its `#[serde(other)] Unknown` is what a reader makes of a code it does
//! not know, never sent); a client should still treat a code it does not know as a generic
//! error of the answer's status.

use crate::ErrorCode;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;

impl utoipa::PartialSchema for ErrorCode {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(ErrorCode::SENT.iter().map(|c| c.as_str())))
            .description(Some(
                "Stable machine-readable code; programs branch on it. A newer server may send a \
                 code not listed here: treat it as a generic error of the answer's status.",
            ))
            .into()
    }
}

impl utoipa::ToSchema for ErrorCode {}

/// The text of one id in an answer (`IdsResponse.ids`): decimal digits (sequence, snowflake),
/// canonical UUIDv7 text (lowercase) or ULID text (Crockford base32, uppercase), as the server
/// writes them.
pub(crate) struct IdText;

/// [`IdText`]'s pattern.
pub(crate) const ID_TEXT_PATTERN: &str = "^([0-9]{1,20}\
|[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\
|[0-7][0-9A-HJKMNP-TV-Z]{25})$";

impl utoipa::PartialSchema for IdText {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(ID_TEXT_PATTERN))
            .description(Some(
                "An id: decimal digits (sequence, snowflake), UUIDv7 text or ULID text.",
            ))
            .into()
    }
}

impl utoipa::ToSchema for IdText {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use utoipa::PartialSchema;

    #[test]
    fn id_text_pattern_matches_what_the_server_writes() {
        let v = serde_json::to_value(crate::IdsResponse::schema()).unwrap();
        assert_eq!(v["properties"]["ids"]["items"]["pattern"], ID_TEXT_PATTERN);
        assert!(!ID_TEXT_PATTERN.contains(' '));
    }

    #[test]
    fn error_code_schema_lists_every_sent_code() {
        let v = serde_json::to_value(ErrorCode::schema()).unwrap();
        let listed: Vec<&str> = v["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        let sent: Vec<&str> = ErrorCode::SENT.iter().map(|c| c.as_str()).collect();
        assert_eq!(listed, sent);
        assert_eq!(v["type"], "string");
    }
}
