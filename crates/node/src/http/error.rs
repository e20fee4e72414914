//! The HTTP status of every error, and the JSON error body: the only place the node's domain
//! errors meet HTTP.
//!
//! Every error answers `{"error": {"code": "snake_case", "message": "..."}}`
//! ([`idmint_api::ErrorBody`]); the code is the domain's ([`IdError::code`]), the status is
//! decided here.

use crate::error::IdError;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use idmint_api::{ErrorBody, ErrorCode};

/// An error answer: status, code and message (and the headers some statuses carry).
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
    /// 429: `Retry-After`, whole seconds.
    retry_after: Option<u64>,
}

impl ApiError {
    /// An answer with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody::new(code, message),
            retry_after: None,
        }
    }

    /// The code.
    pub fn code(&self) -> ErrorCode {
        self.body.error.code
    }
}

/// The HTTP status of a domain error.
pub fn status_of(e: &IdError) -> StatusCode {
    match e {
        IdError::InvalidNamespace(_)
        | IdError::InvalidCount(_)
        | IdError::InvalidRequest(_)
        | IdError::InvalidId(_) => StatusCode::BAD_REQUEST,
        IdError::UnknownNamespace(_) | IdError::NotCreatedByReads(_) => StatusCode::NOT_FOUND,
        IdError::WrongKind(_)
        | IdError::Exhausted { .. }
        | IdError::TimeExhausted(_)
        | IdError::Conflict(_)
        | IdError::TooManyNamespaces { .. }
        | IdError::TooManyMembers { .. } => StatusCode::CONFLICT,
        // Gone for good: an operator retired it; no retry will succeed.
        IdError::Retired(_) => StatusCode::GONE,
        IdError::TooManyStreams(_) => StatusCode::TOO_MANY_REQUESTS,
        IdError::Unavailable { .. } | IdError::ShuttingDown | IdError::NoLeader { .. } => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        IdError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
        IdError::Forbidden(_) => StatusCode::FORBIDDEN,
        IdError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
        // `IdError` is non_exhaustive for other crates only; a new variant is a compile error
        // here, so each gets a deliberate status.
        IdError::Internal(_) | IdError::Lost { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<IdError> for ApiError {
    fn from(e: IdError) -> Self {
        let mut answer = ApiError::new(status_of(&e), e.code(), e.to_string());
        if let IdError::RateLimited {
            retry_after_secs, ..
        } = e
        {
            answer.retry_after = Some(retry_after_secs);
        }
        answer
    }
}

impl IntoResponse for ApiError {
    /// The JSON body; a 401 also carries `WWW-Authenticate: Bearer` (RFC 6750) and a 429
    /// `Retry-After` in whole seconds.
    fn into_response(self) -> Response {
        let mut answer = (self.status, axum::Json(self.body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            answer.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"idmint\""),
            );
        }
        if let Some(secs) = self.retry_after {
            answer
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_fit_the_errors() {
        let cases = [
            (IdError::InvalidCount("x".into()), 400),
            (IdError::UnknownNamespace("x".into()), 404),
            (IdError::WrongKind("x".into()), 409),
            (
                IdError::Exhausted {
                    name: "x".into(),
                    bits: 32,
                },
                409,
            ),
            (
                IdError::TooManyNamespaces {
                    name: "x".into(),
                    limit: 1,
                },
                409,
            ),
            (IdError::Retired("x".into()), 410),
            (IdError::ShuttingDown, 503),
            (IdError::Internal("x".into()), 500),
            (IdError::Unauthorized("x".into()), 401),
            (IdError::Forbidden("x".into()), 403),
            (
                IdError::RateLimited {
                    message: "x".into(),
                    retry_after_secs: 2,
                },
                429,
            ),
        ];
        for (e, status) in cases {
            assert_eq!(status_of(&e).as_u16(), status, "{e:?}");
            let api = ApiError::from(e.clone());
            assert_eq!(api.code(), e.code());
        }
    }

    #[test]
    fn refusals_carry_their_headers() {
        let answer = ApiError::from(IdError::RateLimited {
            message: "x".into(),
            retry_after_secs: 3,
        })
        .into_response();
        assert_eq!(answer.headers()[header::RETRY_AFTER], "3");
        let answer = ApiError::from(IdError::Unauthorized("x".into())).into_response();
        assert_eq!(
            answer.headers()[header::WWW_AUTHENTICATE],
            "Bearer realm=\"idmint\""
        );
    }
}
