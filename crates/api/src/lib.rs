//! idmint-api: the wire types of idmint's API, field by field.
//!
//! Every answer and every error body of the HTTP/JSON API is a type here. The server serialises
//! them, the CLI and the client library deserialise them, and the gRPC and RESP front-ends map
//! the same answers, so a renamed field is a compile error everywhere instead of a `-` printed
//! by a tool that indexed JSON by string.
//!
//! Conventions kept by every type:
//! - 64-bit integers that can exceed 2^53 (ids, watermarks, counts of the id space) travel as
//!   decimal strings, so JavaScript clients never round them; small bounded numbers (steps,
//!   bit counts, ids buffered) are JSON numbers. [`decimal`] is the serde adapter.
//! - Times are RFC 3339 strings in UTC with milliseconds, beside a Unix-milliseconds number
//!   where a program is likely to compute with them.
//! - Every error is [`ErrorBody`]: `{"error": {"code": "snake_case", "message": "..."}}`.
//!
//! With the `openapi` feature every type also derives `utoipa::ToSchema` (the server's
//! `GET /openapi.json` is built from them, so it cannot drift from the JSON).
//!
//! What it does not do: talk to a network, validate ids, or know how a namespace works. It has
//! no dependency besides serde (and utoipa with `openapi`).

mod admin;
pub mod decimal;
mod decode;
mod error;
mod ids;
mod namespace;
#[cfg(feature = "openapi")]
mod schema;

pub use admin::AdvanceResponse;
pub use decode::Decoded;
pub use error::{ErrorBody, ErrorCode, ErrorDetail};
pub use ids::{BlockResponse, GiveBackResponse, IdsResponse};
pub use namespace::{
    CacheSettings, FieldOrder, LayoutSettings, LeaderState, LeaseStatus, NamespaceInfo,
    NamespaceList, NodeField, SequenceHeadroom, SequenceSettings, SequenceState, ShardMap,
    ShardRangeHolder, SnowflakeSettings, SnowflakeState, WorkerLeaseState, WorkerPool,
};

use serde::{Deserialize, Serialize};

/// `GET /healthz`: the process is alive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    /// Always `"ok"`.
    pub status: String,
}

/// `GET /readyz` when the node can serve every namespace it declares now: it is not shutting
/// down, and each declared namespace has ids buffered, a live worker lease, or an authority that
/// answers. An authority that does not answer while the buffers bridge the outage is `degraded`,
/// not unready: a load balancer keeps the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Ready {
    /// `"ready"`, or `"degraded"` while the authority (or one of its members) does not answer.
    pub status: String,
    /// The authority's kind: `file`, `postgres`, `mysql`, `etcd`, `multi`, `memory`.
    pub authority: String,
    /// Whether the authority answered the probe (with several members: at least one did).
    #[serde(default = "answered")]
    pub authority_up: bool,
    /// Why the authority did not answer, while it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority_error: Option<String>,
    /// With a `multi` authority, every member's state; absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberState>,
}

fn answered() -> bool {
    true
}

/// One member of a `multi` authority, as `/readyz` and the namespace detail show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemberState {
    /// Its place in the configuration, counted from 1.
    pub number: usize,
    /// Its kind: `postgres`, `mysql`, `etcd`, `file`.
    pub kind: String,
    /// The residue class it owns.
    pub offset: u64,
    /// Whether its latest operation (or connection attempt) succeeded.
    pub up: bool,
    /// Its latest failure, while it is down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Why it is out of service (lost data, a stale spec, a hard error): it serves nothing
    /// until the node restarts, and a member that lost data until an operator re-seeds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_of_service: Option<String>,
}
