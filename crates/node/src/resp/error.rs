//! The RESP error line of every domain error: the only place the node's [`IdError`]s meet RESP
//! (as `http::error` is for HTTP).
//!
//! An error answers `-CODE message`, Redis style: `CODE` is one upper-case word clients and
//! scripts can match on (Redis clients raise the whole line as the error's message; some map the
//! first word to an exception class, as they do for `WRONGTYPE`), `message` is the domain's own
//! message, the same text the HTTP API puts in `error.message`. Invalid input is `ERR`, as
//! Redis answers a bad argument; every other code names the API code it stands for:
//!
//! | API code | RESP code |
//! |---|---|
//! | `invalid_namespace`, `invalid_count`, `invalid_request`, `invalid_id` | `ERR` |
//! | `unknown_namespace` | `NONAMESPACE` |
//! | `wrong_kind` | `WRONGKIND` |
//! | `namespace_exhausted`, `time_exhausted` | `EXHAUSTED` |
//! | `namespace_retired` | `RETIRED` |
//! | `authority_unavailable` | `UNAVAILABLE` |
//! | `settings_conflict` | `CONFLICT` |
//! | `too_many_namespaces` | `LIMIT` |
//! | `shutting_down` | `SHUTDOWN` |
//! | `internal_error` | `INTERNAL` |
//! | `namespace_lost` | `LOST` |
//! | `unauthorized` | `NOAUTH` (a failed `AUTH` itself: `WRONGPASS`, as Redis) |
//! | `forbidden` | `NOPERM` |
//! | `rate_limited` | `BUSY` (the message says when to retry) |

use super::reply::Reply;
use crate::error::IdError;

/// The RESP code word of a domain error.
pub fn code_of(e: &IdError) -> &'static str {
    match e {
        IdError::InvalidNamespace(_)
        | IdError::InvalidCount(_)
        | IdError::InvalidRequest(_)
        | IdError::InvalidId(_) => "ERR",
        IdError::UnknownNamespace(_) | IdError::NotCreatedByReads(_) => "NONAMESPACE",
        IdError::WrongKind(_) => "WRONGKIND",
        IdError::Exhausted { .. } | IdError::TimeExhausted(_) => "EXHAUSTED",
        IdError::Retired(_) => "RETIRED",
        IdError::Unavailable { .. } => "UNAVAILABLE",
        IdError::Conflict(_) => "CONFLICT",
        IdError::TooManyNamespaces { .. }
        | IdError::TooManyMembers { .. }
        | IdError::TooManyStreams(_) => "LIMIT",
        IdError::ShuttingDown => "SHUTDOWN",
        // A new variant is a compile error here, so each gets a deliberate code.
        IdError::Internal(_) => "INTERNAL",
        IdError::Lost { .. } => "LOST",
        IdError::Unauthorized(_) => "NOAUTH",
        IdError::Forbidden(_) => "NOPERM",
        IdError::RateLimited { .. } => "BUSY",
        IdError::NoLeader { .. } => "NOLEADER",
    }
}

/// The error reply of a domain error.
pub fn reply_of(e: &IdError) -> Reply {
    Reply::error(code_of(e), &e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_fit_the_errors() {
        let cases = [
            (
                IdError::InvalidCount("count must be at least 1".into()),
                "ERR count must be at least 1",
            ),
            (
                IdError::Exhausted {
                    name: "small".into(),
                    bits: 32,
                },
                "EXHAUSTED namespace \"small\" is exhausted: every 32-bit id has been handed out",
            ),
            (
                IdError::Retired("old".into()),
                "RETIRED namespace \"old\" is retired: it hands out no id any more \
                 (idmint admin retire)",
            ),
            (IdError::ShuttingDown, "SHUTDOWN the node is shutting down"),
            (IdError::WrongKind("x".into()), "WRONGKIND x"),
            (IdError::Unauthorized("x".into()), "NOAUTH x"),
            (IdError::Forbidden("x".into()), "NOPERM x"),
        ];
        for (e, line) in cases {
            assert_eq!(reply_of(&e), Reply::Error(line.into()), "{e:?}");
        }
    }
}
