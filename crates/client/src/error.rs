//! [`ClientError`]: what a client call can fail with, and the one place gRPC statuses become
//! client errors ([`ClientError::from_grpc`]).
//!
//! The node puts its stable idmint code (docs/api.md) in the `idmint-error-code` trailer of every
//! error (docs/grpc.md, "Status codes"); every variant a node's answer becomes keeps it, and
//! [`ClientError::code`] names the code of every error (the node's, or the client's own:
//! `unavailable`, `closed`, `invalid_namespace`, `invalid_count`), so one code always means one
//! variant. Messages never contain a node's url (design.md section 7): nodes are named by their
//! position in the list given to `Client::connect`.

use idmint_core::NamespaceNameError;
use idmint_proto::nodes::error_code;
use thiserror::Error;
use tonic::{Code, Status};

/// Why a client call failed.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No node answered (`UNAVAILABLE`, `DEADLINE_EXCEEDED`, a connection error or the client's
    /// timeout at every url), or nothing arrived within the refill wait. Retry later.
    #[error("unavailable: {message}")]
    Unavailable {
        /// The idmint code when a node sent one (`authority_unavailable`, `shutting_down`).
        code: Option<String>,
        /// What went wrong, last node first.
        message: String,
    },
    /// The node does not serve this namespace (`NOT_FOUND`), and would not create it.
    #[error("unknown namespace {namespace}")]
    UnknownNamespace {
        /// The namespace.
        namespace: String,
    },
    /// The namespace ran out of ids or time (`RESOURCE_EXHAUSTED`: `namespace_exhausted`,
    /// `time_exhausted`), or the node serves too many namespaces (`too_many_namespaces`).
    #[error("exhausted: {message}")]
    Exhausted {
        /// The idmint code.
        code: Option<String>,
        /// The node's message.
        message: String,
    },
    /// The node lost the namespace's state (`DATA_LOSS`, `namespace_lost`): it stopped serving
    /// it rather than risk a duplicate.
    #[error("namespace lost: {message}")]
    Lost {
        /// The node's message.
        message: String,
    },
    /// The node refused the request (`INVALID_ARGUMENT`, `FAILED_PRECONDITION`): a count above
    /// its limits, a namespace of another kind or settings.
    #[error("rejected: {message}")]
    Rejected {
        /// The idmint code.
        code: Option<String>,
        /// The node's message.
        message: String,
    },
    /// The node failed (`INTERNAL` or another status), answered a code newer than this client
    /// where its status names one code only (`NOT_FOUND`, `DATA_LOSS`), or answered something
    /// that breaks the protocol (a block outside the namespace, ids of the wrong kind): nothing
    /// of the answer was used.
    #[error("node error: {message}")]
    Node {
        /// The idmint code, when the node sent one (`internal_error`).
        code: Option<String>,
        /// What went wrong.
        message: String,
    },
    /// The namespace name is not valid.
    #[error(transparent)]
    InvalidNamespace(#[from] NamespaceNameError),
    /// A count of zero or above the client's limit.
    #[error("invalid count {count}: must be 1 to {max}")]
    InvalidCount {
        /// The count asked for.
        count: u64,
        /// The most allowed.
        max: u64,
    },
    /// The client's configuration is unusable (no urls, a url that is not `http://` or
    /// `https://`, TLS refused, a bad buffer policy).
    #[error("invalid client configuration: {message}")]
    InvalidConfig {
        /// What is wrong.
        message: String,
    },
    /// The client was closed.
    #[error("the client is closed")]
    Closed,
    /// The blocking wrapper could not start its runtime.
    #[error("cannot start the client's runtime: {message}")]
    Runtime {
        /// The operating system's reason.
        message: String,
    },
}

impl ClientError {
    /// Whether retrying later may succeed (the node or its authority was unavailable).
    pub fn is_retryable(&self) -> bool {
        matches!(self, ClientError::Unavailable { .. })
    }

    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        ClientError::Unavailable {
            code: None,
            message: message.into(),
        }
    }

    pub(crate) fn node(message: impl Into<String>) -> Self {
        ClientError::Node {
            code: None,
            message: message.into(),
        }
    }

    /// The stable code of this error: the node's idmint code (docs/api.md) for an answer of a
    /// node, else the client's own: `unavailable` (no node answered), `closed`,
    /// `invalid_namespace` and `invalid_count` (checked before asking a node). `None` for a
    /// configuration or runtime error, and for a node's answer without a code.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Unavailable { code, .. } => Some(code.as_deref().unwrap_or("unavailable")),
            ClientError::UnknownNamespace { .. } => Some("unknown_namespace"),
            ClientError::Lost { .. } => Some("namespace_lost"),
            ClientError::Exhausted { code, .. }
            | ClientError::Rejected { code, .. }
            | ClientError::Node { code, .. } => code.as_deref(),
            ClientError::InvalidNamespace(_) => Some("invalid_namespace"),
            ClientError::InvalidCount { .. } => Some("invalid_count"),
            ClientError::Closed => Some("closed"),
            ClientError::InvalidConfig { .. } | ClientError::Runtime { .. } => None,
        }
    }

    /// The client error of a node's gRPC answer about `namespace`: its status `code`, its
    /// `message` and the `idmint-error-code` trailer's value, if any. Every call maps a node's
    /// answer with this.
    pub fn from_grpc(
        namespace: &str,
        code: Code,
        message: impl Into<String>,
        idmint_code: Option<&str>,
    ) -> ClientError {
        let message = message.into();
        let code_kept = idmint_code.map(str::to_owned);
        // A status that stands for one code, answered with another (a newer node's): the
        // general variant, the code kept.
        let other_than = |own: &str| idmint_code.is_some_and(|c| c != own);
        match code {
            Code::NotFound if other_than("unknown_namespace") => ClientError::Node {
                code: code_kept,
                message,
            },
            Code::NotFound => ClientError::UnknownNamespace {
                namespace: namespace.to_owned(),
            },
            Code::DataLoss if other_than("namespace_lost") => ClientError::Node {
                code: code_kept,
                message,
            },
            Code::DataLoss => ClientError::Lost { message },
            Code::ResourceExhausted => ClientError::Exhausted {
                code: code_kept,
                message,
            },
            Code::InvalidArgument
            | Code::FailedPrecondition
            | Code::OutOfRange
            | Code::Unauthenticated
            | Code::PermissionDenied => ClientError::Rejected {
                code: code_kept,
                message,
            },
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Aborted => {
                ClientError::Unavailable {
                    code: code_kept,
                    message,
                }
            }
            _ => ClientError::Node {
                code: code_kept,
                message,
            },
        }
    }
}

/// The client error of a status a node answered about `namespace` (`node`: its index in the
/// configured urls; messages number nodes from 1, as docs/client.md does).
pub(crate) fn from_status(namespace: &str, node: usize, status: &Status) -> ClientError {
    let message = format!("node #{}: {}", node + 1, status.message());
    ClientError::from_grpc(
        namespace,
        status.code(),
        message,
        error_code(status).as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use idmint_proto::nodes::ERROR_CODE_KEY;

    #[test]
    fn statuses_map_to_their_variants_with_the_idmint_code() {
        let mut status = Status::new(Code::ResourceExhausted, "namespace_exhausted: out");
        status.metadata_mut().insert(
            ERROR_CODE_KEY,
            "namespace_exhausted"
                .parse()
                .unwrap_or_else(|_| unreachable!()),
        );
        match from_status("photos", 0, &status) {
            ClientError::Exhausted { code, message } => {
                assert_eq!(code.as_deref(), Some("namespace_exhausted"));
                assert_eq!(message, "node #1: namespace_exhausted: out");
            }
            other => panic!("{other:?}"),
        }
        let cases = [
            (Code::NotFound, "unknown"),
            (Code::DataLoss, "lost"),
            (Code::InvalidArgument, "rejected"),
            (Code::FailedPrecondition, "rejected"),
            (Code::Unavailable, "unavailable"),
            (Code::DeadlineExceeded, "unavailable"),
            (Code::Internal, "node"),
        ];
        for (code, want) in cases {
            let got = match from_status("photos", 0, &Status::new(code, "x")) {
                ClientError::UnknownNamespace { .. } => "unknown",
                ClientError::Lost { .. } => "lost",
                ClientError::Rejected { .. } => "rejected",
                ClientError::Unavailable { .. } => "unavailable",
                ClientError::Node { .. } => "node",
                other => panic!("{other:?}"),
            };
            assert_eq!(got, want, "{code:?}");
        }
        assert!(from_status("p", 0, &Status::new(Code::Unavailable, "x")).is_retryable());
    }

    #[test]
    fn every_error_of_a_node_keeps_its_code_and_one_code_means_one_variant() {
        let e = |code, idmint: Option<&str>| ClientError::from_grpc("photos", code, "m", idmint);
        let internal = e(Code::Internal, Some("internal_error"));
        assert!(matches!(internal, ClientError::Node { .. }), "{internal:?}");
        assert_eq!(internal.code(), Some("internal_error"));
        let unknown = e(Code::NotFound, Some("unknown_namespace"));
        assert!(matches!(unknown, ClientError::UnknownNamespace { .. }));
        assert_eq!(unknown.code(), Some("unknown_namespace"));
        assert_eq!(e(Code::DataLoss, None).code(), Some("namespace_lost"));
        // A newer node's code on a status that stands for one code: the general variant.
        for code in [Code::NotFound, Code::DataLoss, Code::Internal] {
            let newer = e(code, Some("brand_new"));
            assert!(matches!(newer, ClientError::Node { .. }), "{newer:?}");
            assert_eq!(newer.code(), Some("brand_new"));
        }
        // Statuses of several codes keep the node's, known or not.
        assert_eq!(
            e(Code::PermissionDenied, Some("forbidden")).code(),
            Some("forbidden")
        );
        assert_eq!(
            e(Code::ResourceExhausted, Some("brand_new")).code(),
            Some("brand_new")
        );
        // Without a code from a node: the client's own.
        assert_eq!(e(Code::Unavailable, None).code(), Some("unavailable"));
        assert_eq!(ClientError::Closed.code(), Some("closed"));
        let count = ClientError::InvalidCount { count: 0, max: 1 };
        assert_eq!(count.code(), Some("invalid_count"));
        let config = ClientError::InvalidConfig {
            message: "x".into(),
        };
        assert_eq!(config.code(), None);
    }
}
