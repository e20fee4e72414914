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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use utoipa::PartialSchema;

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
