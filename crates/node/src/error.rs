//! Errors of the node library, each with the stable snake_case code of the API. Which status a
//! protocol answers with is the front-end's business (`http::error` for HTTP). Messages are for
//! users: they say what is wrong and, where it helps, what to do; they never carry internals
//! beyond the authority's own short reason.

use idmint_api::ErrorCode;
use idmint_core::NamespaceNameError;
use thiserror::Error;

/// Why a request for ids, a block or a decode failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum IdError {
    /// The namespace name is not valid.
    #[error("invalid namespace name: {0}")]
    InvalidNamespace(#[from] NamespaceNameError),
    /// No such namespace, and auto-create is off.
    #[error("namespace {0:?} is not configured (auto_create is off)")]
    UnknownNamespace(String),
    /// A read (info, decode, give-back) named a namespace that does not exist: reads never
    /// create one, whatever `auto_create` says.
    #[error(
        "namespace {0:?} does not exist; reads do not create namespaces (a request for ids does)"
    )]
    NotCreatedByReads(String),
    /// `count` is not a number in range.
    #[error("{0}")]
    InvalidCount(String),
    /// Another query parameter or a path part is wrong.
    #[error("{0}")]
    InvalidRequest(String),
    /// The id to decode is not an id of the namespace.
    #[error("{0}")]
    InvalidId(String),
    /// The operation does not apply to this kind of namespace.
    #[error("{0}")]
    WrongKind(String),
    /// A 32/64-bit sequence namespace has no id left.
    #[error("namespace {name:?} is exhausted: every {bits}-bit id has been handed out")]
    Exhausted {
        /// Namespace.
        name: String,
        /// Width.
        bits: u32,
    },
    /// A sequence namespace was retired (`idmint admin retire`): it hands out no id any more.
    /// Not [`IdError::Exhausted`]: its ids did not run out, an operator stopped it for good.
    #[error("namespace {0:?} is retired: it hands out no id any more (idmint admin retire)")]
    Retired(String),
    /// A snowflake layout's timestamp field has run out.
    #[error("namespace {0:?}: the layout's timestamp field has run out; configure a later epoch or wider timestamp")]
    TimeExhausted(String),
    /// The authority cannot be reached and the buffer is empty.
    #[error("namespace {name:?}: no ids buffered and the authority is unavailable: {reason}")]
    Unavailable {
        /// Namespace.
        name: String,
        /// What the authority said, or that it did not answer in time.
        reason: String,
    },
    /// The stored namespace's settings differ from the configured ones.
    #[error("{0}")]
    Conflict(String),
    /// Creating the namespace on first use would exceed `server.max_namespaces`.
    #[error("namespace {name:?} is not served and this node creates no more namespaces on first use: it already serves {limit} (server.max_namespaces); declare it in the configuration or raise the limit")]
    TooManyNamespaces {
        /// The namespace asked for.
        name: String,
        /// `server.max_namespaces`.
        limit: usize,
    },
    /// Creating a member of a family (`[namespaces."NAME.*"]`) on first use would exceed its
    /// `max_members`: the same code as [`IdError::TooManyNamespaces`].
    #[error("namespace {name:?} is not served and would be a new member of family {family}, which has {limit} members on this node already (namespaces.\"{family}\".max_members); raise the bound or declare the namespace")]
    TooManyMembers {
        /// The namespace asked for.
        name: String,
        /// The family's pattern (`invoices.*`).
        family: String,
        /// Its `max_members`.
        limit: usize,
    },
    /// The namespace existed and its store no longer has it, or went back in time: never
    /// re-created (docs/uniqueness.md); an operator re-seeds it.
    #[error("namespace {name:?} cannot be served: {reason}")]
    Lost {
        /// The namespace.
        name: String,
        /// What the store answered.
        reason: String,
    },
    /// The node is shutting down.
    #[error("the node is shutting down")]
    ShuttingDown,
    /// Authentication is on and the request carries no token, or one the node does not know
    /// ([`crate::auth`]).
    #[error("{0}")]
    Unauthorized(String),
    /// The token lacks the scope the operation needs on this namespace ([`crate::auth`]).
    #[error("{0}")]
    Forbidden(String),
    /// The token's rate quota on this namespace is used up for now ([`crate::auth::quota`]).
    #[error("{message}")]
    RateLimited {
        /// What was refused and when to retry.
        message: String,
        /// Whole seconds to wait before the request can pass (at least 1): HTTP's
        /// `Retry-After`.
        retry_after_secs: u64,
    },
    /// The node serves `server.max_streams` streams already.
    #[error("this node serves {0} streams already (server.max_streams); retry when one ended")]
    TooManyStreams(usize),
    /// A strict namespace had no leader to serve it within the wait, or a forward reached a
    /// node that does not lead it.
    #[error("namespace {name:?} has no leader: {reason}")]
    NoLeader {
        /// The namespace.
        name: String,
        /// Why (no leader within the wait, this node does not lead).
        reason: String,
    },
    /// A broken invariant; the namespace stops serving rather than risk a duplicate.
    #[error("namespace {0:?} stopped serving after an internal consistency check failed; see the server log")]
    Internal(String),
}

impl IdError {
    /// The stable error code of the API, the same on every front-end. Each front-end maps the
    /// error to its own status (HTTP: `http::error`).
    pub fn code(&self) -> ErrorCode {
        match self {
            IdError::InvalidNamespace(_) => ErrorCode::InvalidNamespace,
            IdError::UnknownNamespace(_) | IdError::NotCreatedByReads(_) => {
                ErrorCode::UnknownNamespace
            }
            IdError::InvalidCount(_) => ErrorCode::InvalidCount,
            IdError::InvalidRequest(_) => ErrorCode::InvalidRequest,
            IdError::InvalidId(_) => ErrorCode::InvalidId,
            IdError::WrongKind(_) => ErrorCode::WrongKind,
            IdError::Exhausted { .. } => ErrorCode::NamespaceExhausted,
            IdError::Retired(_) => ErrorCode::NamespaceRetired,
            IdError::TimeExhausted(_) => ErrorCode::TimeExhausted,
            IdError::Unavailable { .. } => ErrorCode::AuthorityUnavailable,
            IdError::Conflict(_) => ErrorCode::SettingsConflict,
            IdError::TooManyNamespaces { .. } | IdError::TooManyMembers { .. } => {
                ErrorCode::TooManyNamespaces
            }
            IdError::Lost { .. } => ErrorCode::NamespaceLost,
            IdError::ShuttingDown => ErrorCode::ShuttingDown,
            IdError::Unauthorized(_) => ErrorCode::Unauthorized,
            IdError::Forbidden(_) => ErrorCode::Forbidden,
            IdError::RateLimited { .. } => ErrorCode::RateLimited,
            IdError::TooManyStreams(_) => ErrorCode::TooManyStreams,
            IdError::Internal(_) => ErrorCode::InternalError,
            IdError::NoLeader { .. } => ErrorCode::NoLeader,
        }
    }
}

/// Why a node could not start.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum NodeError {
    /// A declared namespace could not be set up. The error names the namespace itself.
    #[error("setting up a declared namespace: {source}")]
    Namespace {
        /// Namespace.
        name: String,
        /// What went wrong.
        source: IdError,
    },
    /// Serving failed.
    #[error("serving HTTP failed: {0}")]
    Io(#[from] std::io::Error),
    /// A front-end's task panicked or was cancelled.
    #[error("a front-end stopped unexpectedly: {0}")]
    FrontEnd(String),
    /// The `[peers]` section's TLS files could not be read.
    #[error("{0}")]
    Peers(String),
    /// The blocks kept at the last clean stop could not be read from the data directory.
    #[error("reading the blocks kept at the last clean stop: {0}")]
    Kept(String),
}
