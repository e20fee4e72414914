//! The error body every failed request answers with, on every route.

use serde::{Deserialize, Serialize};
use std::fmt;

/// `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The error itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    /// Stable machine-readable code; programs branch on it.
    pub code: ErrorCode,
    /// For people: what is wrong and, where it helps, what to do. Not stable.
    pub message: String,
}

impl ErrorBody {
    /// A body with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            error: ErrorDetail {
                code,
                message: message.into(),
            },
        }
    }
}

/// The stable error codes. docs/api.md lists the HTTP status of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// The namespace name is not valid (400).
    InvalidNamespace,
    /// No such namespace, and it may not be created by this request (404).
    UnknownNamespace,
    /// `count` is not a whole number in range (400).
    InvalidCount,
    /// Another query parameter or a path part is wrong (400).
    InvalidRequest,
    /// The id is not an id of the namespace's kind (400).
    InvalidId,
    /// The operation does not apply to the namespace's kind (409).
    WrongKind,
    /// A sequence namespace has no id left (409).
    NamespaceExhausted,
    /// A sequence namespace was retired (`idmint admin retire`): it hands out no id any more
    /// (410).
    NamespaceRetired,
    /// A snowflake layout's timestamp field has run out (409).
    TimeExhausted,
    /// No ids buffered and the authority is unavailable (503).
    AuthorityUnavailable,
    /// The stored settings differ from the configured ones (409).
    SettingsConflict,
    /// The node is shutting down (503).
    ShuttingDown,
    /// A consistency check failed; the namespace stopped serving (500).
    InternalError,
    /// The namespace existed and its store lost it (or went back in time); it is never
    /// re-created: an operator re-seeds it (500).
    NamespaceLost,
    /// The node already serves `server.max_namespaces` namespaces created on first use and
    /// creates no more (409).
    TooManyNamespaces,
    /// No such route (404).
    NotFound,
    /// The route exists, not with this method (405).
    MethodNotAllowed,
    /// No bearer token, or one this node does not know (401).
    Unauthorized,
    /// The token is known and lacks the scope for this namespace and operation (403).
    Forbidden,
    /// The token's rate quota for this namespace is used up for now; retry after the time the
    /// answer says (429, `Retry-After`).
    RateLimited,
    /// The node serves `server.max_streams` streams already; retry when one ended (gRPC
    /// `RESOURCE_EXHAUSTED`).
    TooManyStreams,
    /// A strict namespace had no leader within the node's wait (`peers.wait_ms`): a failover,
    /// or an authority that does not answer; or a forward reached a node that does not lead
    /// (503).
    NoLeader,
    /// A code this version of the client does not know (a newer server).
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    /// Every code a server of this version sends: all but [`ErrorCode::Unknown`], which only a
    /// reader produces. The OpenAPI schema of `code` is this list.
    pub const SENT: [ErrorCode; 22] = [
        ErrorCode::InvalidNamespace,
        ErrorCode::UnknownNamespace,
        ErrorCode::InvalidCount,
        ErrorCode::InvalidRequest,
        ErrorCode::InvalidId,
        ErrorCode::WrongKind,
        ErrorCode::NamespaceExhausted,
        ErrorCode::NamespaceRetired,
        ErrorCode::TimeExhausted,
        ErrorCode::AuthorityUnavailable,
        ErrorCode::SettingsConflict,
        ErrorCode::ShuttingDown,
        ErrorCode::InternalError,
        ErrorCode::NamespaceLost,
        ErrorCode::TooManyNamespaces,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::RateLimited,
        ErrorCode::TooManyStreams,
        ErrorCode::NoLeader,
    ];

    /// The snake_case text of the code, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidNamespace => "invalid_namespace",
            ErrorCode::UnknownNamespace => "unknown_namespace",
            ErrorCode::InvalidCount => "invalid_count",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidId => "invalid_id",
            ErrorCode::WrongKind => "wrong_kind",
            ErrorCode::NamespaceExhausted => "namespace_exhausted",
            ErrorCode::NamespaceRetired => "namespace_retired",
            ErrorCode::TimeExhausted => "time_exhausted",
            ErrorCode::AuthorityUnavailable => "authority_unavailable",
            ErrorCode::NoLeader => "no_leader",
            ErrorCode::SettingsConflict => "settings_conflict",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::InternalError => "internal_error",
            ErrorCode::NamespaceLost => "namespace_lost",
            ErrorCode::TooManyNamespaces => "too_many_namespaces",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::TooManyStreams => "too_many_streams",
            ErrorCode::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn codes_are_snake_case_on_the_wire() {
        let body = ErrorBody::new(ErrorCode::NamespaceExhausted, "no id left");
        let text = serde_json::to_string(&body).unwrap();
        assert_eq!(
            text,
            r#"{"error":{"code":"namespace_exhausted","message":"no id left"}}"#
        );
        assert_eq!(serde_json::from_str::<ErrorBody>(&text).unwrap(), body);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["code"], ErrorCode::NamespaceExhausted.as_str());
    }

    #[test]
    fn every_sent_code_round_trips_and_none_is_unknown() {
        for code in ErrorCode::SENT {
            assert_ne!(code, ErrorCode::Unknown);
            let text = serde_json::to_string(&code).unwrap();
            assert_eq!(text, format!("\"{code}\""));
            assert_eq!(serde_json::from_str::<ErrorCode>(&text).unwrap(), code);
        }
    }

    #[test]
    fn unknown_codes_still_parse() {
        let body: ErrorBody =
            serde_json::from_str(r#"{"error":{"code":"from_the_future","message":"m"}}"#).unwrap();
        assert_eq!(body.error.code, ErrorCode::Unknown);
    }
}
