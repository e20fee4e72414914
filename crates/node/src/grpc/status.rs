//! The gRPC status of every domain error: the only place the node's errors meet gRPC (as
//! `http/error.rs` is for HTTP).
//!
//! Every error answers a status whose code is chosen here from the [`IdError`] variant, whose
//! message is `"<idmint code>: <message>"` (the code is the domain's stable snake_case
//! [`IdError::code`], the same as the HTTP body's), and whose metadata carries the code alone
//! as `idmint-error-code` (sent as a trailer, or a header of a trailers-only answer), so a
//! client can branch on it without parsing the message. Nothing else of the node's internals is
//! in a status.

use crate::error::IdError;
use idmint_api::ErrorCode;
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

/// The metadata key holding the idmint error code.
pub const ERROR_CODE_KEY: &str = "idmint-error-code";

/// The gRPC code of a domain error.
pub fn code_of(e: &IdError) -> Code {
    match e {
        IdError::InvalidNamespace(_)
        | IdError::InvalidCount(_)
        | IdError::InvalidRequest(_)
        | IdError::InvalidId(_) => Code::InvalidArgument,
        IdError::UnknownNamespace(_) | IdError::NotCreatedByReads(_) => Code::NotFound,
        // The namespace is not in a state (kind, stored settings) for the operation.
        // A retired namespace is in no state to hand out ids, ever again.
        IdError::WrongKind(_) | IdError::Conflict(_) | IdError::Retired(_) => {
            Code::FailedPrecondition
        }
        // The namespace's ids, a layout's time or the node's namespaces have run out.
        IdError::Exhausted { .. }
        | IdError::TimeExhausted(_)
        | IdError::TooManyNamespaces { .. }
        | IdError::TooManyMembers { .. }
        | IdError::TooManyStreams(_) => Code::ResourceExhausted,
        // Retrying later may succeed.
        IdError::Unavailable { .. } | IdError::ShuttingDown | IdError::NoLeader { .. } => {
            Code::Unavailable
        }
        IdError::Unauthorized(_) => Code::Unauthenticated,
        IdError::Forbidden(_) => Code::PermissionDenied,
        // The token's rate quota; the message says when to retry.
        IdError::RateLimited { .. } => Code::ResourceExhausted,
        // The store lost the namespace's data: never re-created, an operator re-seeds it.
        IdError::Lost { .. } => Code::DataLoss,
        // `IdError` is non_exhaustive for other crates only; a new variant is a compile error
        // here, so each gets a deliberate code.
        IdError::Internal(_) => Code::Internal,
    }
}

/// A status of `code` for the idmint error `error`, with `message`.
pub fn status(code: Code, error: ErrorCode, message: impl std::fmt::Display) -> Status {
    let mut status = Status::new(code, format!("{}: {message}", error.as_str()));
    status
        .metadata_mut()
        .insert(ERROR_CODE_KEY, MetadataValue::from_static(error.as_str()));
    status
}

/// The status of a domain error.
pub fn from_id_error(e: &IdError) -> Status {
    status(code_of(e), e.code(), e)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn codes_fit_the_errors_and_carry_the_idmint_code() {
        let cases = [
            (IdError::InvalidCount("x".into()), Code::InvalidArgument),
            (IdError::UnknownNamespace("x".into()), Code::NotFound),
            (IdError::WrongKind("x".into()), Code::FailedPrecondition),
            (
                IdError::Exhausted {
                    name: "x".into(),
                    bits: 32,
                },
                Code::ResourceExhausted,
            ),
            (IdError::Retired("x".into()), Code::FailedPrecondition),
            (IdError::ShuttingDown, Code::Unavailable),
            (
                IdError::Lost {
                    name: "x".into(),
                    reason: "gone".into(),
                },
                Code::DataLoss,
            ),
            (IdError::Internal("x".into()), Code::Internal),
            (IdError::Unauthorized("x".into()), Code::Unauthenticated),
            (IdError::Forbidden("x".into()), Code::PermissionDenied),
            (
                IdError::RateLimited {
                    message: "x".into(),
                    retry_after_secs: 1,
                },
                Code::ResourceExhausted,
            ),
        ];
        for (e, code) in cases {
            let s = from_id_error(&e);
            assert_eq!(s.code(), code, "{e:?}");
            assert!(
                s.message().starts_with(e.code().as_str()),
                "{}",
                s.message()
            );
            assert_eq!(
                s.metadata().get(ERROR_CODE_KEY).unwrap().to_str().unwrap(),
                e.code().as_str()
            );
        }
    }
}
