//! The HTTP/JSON API (DESIGN.md's interface contract), on axum.
//!
//! Every error is a status that fits and `{"error": {"code": "snake_case", "message": "..."}}`,
//! including unknown routes, wrong methods and malformed query strings; nothing panics on input.
//! Ids are written as decimal strings (JavaScript-safe) or canonical UUID/ULID text.

use crate::config::CacheMode;
use crate::error::IdError;
use crate::metrics::ErrorLabels;
use crate::namespace::{Ids, Namespace};
use crate::registry::Node;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use idmint_core::{Sizing, Ulid, Uuid7};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The router of the whole API over `node`.
pub fn router(node: Arc<Node>) -> Router {
    Router::new()
        .route("/v1/ids/{namespace}", get(get_ids))
        .route("/v1/blocks/{namespace}", post(post_block))
        .route("/v1/decode/{namespace}/{id}", get(decode))
        .route("/v1/namespaces", get(list_namespaces))
        .route("/v1/namespaces/{namespace}", get(get_namespace))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(node)
}

/// An error response.
struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn from_id(node: &Node, e: IdError) -> ApiError {
        node.metrics()
            .errors
            .get_or_create(&ErrorLabels { code: e.code() })
            .inc();
        ApiError {
            status: StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            code: e.code(),
            message: e.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": self.code, "message": self.message } });
        (self.status, axum::Json(body)).into_response()
    }
}

async fn not_found() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        code: "not_found",
        message: "no such route; see /v1/namespaces".into(),
    }
}

async fn method_not_allowed() -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: "method_not_allowed",
        message: "method not allowed on this route (ids: GET, blocks: POST)".into(),
    }
}

/// Parses `count` (default 1, 1..=max) from a query string that may hold nothing else.
fn parse_count(query: Option<&str>, max: u64) -> Result<u64, IdError> {
    let mut count = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "count" => count = Some(v),
            other => {
                return Err(IdError::InvalidRequest(format!(
                    "unknown query parameter {other:?}; only count is accepted"
                )))
            }
        }
    }
    let Some(raw) = count else { return Ok(1) };
    let n: u64 = raw.parse().map_err(|_| {
        IdError::InvalidCount(format!(
            "count must be a whole number from 1 to {max}, got {raw:?}"
        ))
    })?;
    if n == 0 {
        return Err(IdError::InvalidCount("count must be at least 1".into()));
    }
    if n > max {
        return Err(IdError::InvalidCount(format!(
            "count {n} is above this server's maximum of {max} (server.max_count)"
        )));
    }
    Ok(n)
}

fn json_response(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn get_ids(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let result = async {
        let count = parse_count(query.as_deref(), node.config().max_count)?;
        let ns = node.namespace(&name).await?;
        let ids = ns.ids(count).await?;
        Ok::<_, IdError>((ns, ids))
    }
    .await;
    match result {
        Ok((ns, ids)) => json_response(ids_json(ns.name().as_str(), &ids)),
        Err(e) => ApiError::from_id(&node, e).into_response(),
    }
}

/// `{"namespace":"…","ids":["…",…]}`, written directly: names are validated to need no
/// escaping, and ids are digits or base32/hex.
fn ids_json(namespace: &str, ids: &Ids) -> String {
    let mut out = String::with_capacity(32 + namespace.len() + ids.len() * 24);
    out.push_str("{\"namespace\":\"");
    out.push_str(namespace);
    out.push_str("\",\"ids\":[");
    let mut buf = itoa::Buffer::new();
    match ids {
        Ids::Numbers(v) => {
            for (i, id) in v.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push('"');
                out.push_str(buf.format(*id));
                out.push('"');
            }
        }
        Ids::Text(v) => {
            for (i, id) in v.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push('"');
                out.push_str(id);
                out.push('"');
            }
        }
    }
    out.push_str("]}");
    out
}

async fn post_block(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let result = async {
        let count = parse_count(query.as_deref(), node.config().max_count.max(1_000_000))?;
        let ns = node.namespace(&name).await?;
        match &*ns {
            Namespace::Sequence(s) => s.block(count).await,
            other => Err(IdError::WrongKind(format!(
                "namespace {:?} is a {} namespace; blocks exist only for sequence namespaces",
                other.name().as_str(),
                other.kind()
            ))),
        }
    }
    .await;
    match result {
        Ok(b) => {
            let body = json!({ "start": b.start().to_string(), "end": b.end().to_string(), "step": b.step() });
            axum::Json(body).into_response()
        }
        Err(e) => ApiError::from_id(&node, e).into_response(),
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

async fn decode(
    State(node): State<Arc<Node>>,
    Path((name, id)): Path<(String, String)>,
) -> Response {
    let result = async {
        let ns = node.namespace(&name).await?;
        decode_in(&ns, &id)
    }
    .await;
    match result {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => ApiError::from_id(&node, e).into_response(),
    }
}

fn parse_u64_id(id: &str) -> Result<u64, IdError> {
    id.parse::<u64>()
        .map_err(|_| IdError::InvalidId(format!("{id:?} is not a decimal 64-bit id")))
}

fn decode_in(ns: &Namespace, id: &str) -> Result<Value, IdError> {
    let name = ns.name().as_str();
    match ns {
        Namespace::Snowflake(s) => {
            let n = parse_u64_id(id)?;
            let d = s
                .generator()
                .layout()
                .decode(n)
                .map_err(|e| IdError::InvalidId(e.to_string()))?;
            Ok(json!({
                "namespace": name, "kind": "snowflake", "id": n.to_string(),
                "timestamp": d.rfc3339(), "unix_ms": d.unix_millis(),
                "worker": d.parts.node, "sequence": d.parts.sequence,
            }))
        }
        Namespace::Sequence(s) => {
            let n = parse_u64_id(id)?;
            let spec = s.spec();
            let in_class =
                n >= spec.first() && n <= spec.width().max_id() && n % spec.step() == spec.offset();
            Ok(json!({
                "namespace": name, "kind": "sequence", "id": n.to_string(),
                "in_namespace": in_class, "issued": in_class && n < s.watermark(),
            }))
        }
        Namespace::Uuid7(..) => {
            let u: Uuid7 = id
                .parse()
                .map_err(|e| IdError::InvalidId(format!("{id:?} is not a UUIDv7: {e}")))?;
            let t = SystemTime::UNIX_EPOCH + Duration::from_millis(u.unix_millis());
            Ok(
                json!({ "namespace": name, "kind": "uuid7", "id": u.to_string(), "timestamp": rfc3339(t), "unix_ms": u.unix_millis() }),
            )
        }
        Namespace::Ulid(..) => {
            let u: Ulid = id
                .parse()
                .map_err(|e| IdError::InvalidId(format!("{id:?} is not a ULID: {e}")))?;
            let t = SystemTime::UNIX_EPOCH + Duration::from_millis(u.unix_millis());
            Ok(
                json!({ "namespace": name, "kind": "ulid", "id": u.to_string(), "timestamp": rfc3339(t), "unix_ms": u.unix_millis() }),
            )
        }
    }
}

/// Settings and live state of one namespace.
pub fn namespace_info(ns: &Namespace) -> Value {
    let name = ns.name().as_str();
    match ns {
        Namespace::Sequence(s) => {
            let spec = s.spec();
            let cache = match s.cache() {
                CacheMode::Off => json!({ "mode": "off" }),
                CacheMode::Buffered(p) => match p.config().sizing {
                    Sizing::Fixed(n) => {
                        json!({ "mode": "fixed", "block_size": n, "low_water": p.config().low_water })
                    }
                    Sizing::Adaptive {
                        buffer_seconds,
                        min_block,
                        max_block,
                    } => json!({
                        "mode": "adaptive", "buffer_seconds": buffer_seconds, "min_block": min_block,
                        "max_block": max_block, "low_water": p.config().low_water,
                    }),
                },
            };
            let (buffered, stats, demand, block_size) = s.with_buffer(|b| {
                (
                    b.buffered(),
                    b.stats(),
                    b.demand_per_sec(),
                    b.target_block(),
                )
            });
            let watermark = s.watermark();
            let capacity = spec.capacity();
            let used = spec.ids_between(spec.first(), watermark);
            let left = capacity.saturating_sub(used);
            let used_fraction = if capacity == 0 {
                1.0
            } else {
                used as f64 / capacity as f64
            };
            let exhaustion = if demand > 1e-3 {
                let secs = left as f64 / demand;
                // Beyond a thousand years the date means nothing.
                (secs < 3.15e10).then(|| rfc3339(SystemTime::now() + Duration::from_secs_f64(secs)))
            } else {
                None
            };
            json!({
                "namespace": name, "kind": "sequence",
                "settings": {
                    "width": spec.width().bits(), "start": spec.first().to_string(), "step": spec.step(),
                    "offset": spec.offset(), "cache": cache,
                },
                "state": {
                    "watermark": watermark.to_string(), "ids_buffered": buffered,
                    "demand_per_second": demand, "block_size": block_size,
                    "ids_served": s.served(), "ids_burned": stats.burned, "refills": stats.refills,
                    "ids_used": used.to_string(), "capacity": capacity.to_string(),
                    "used_fraction": used_fraction, "projected_exhaustion": exhaustion,
                    "last_error": s.last_error(),
                },
            })
        }
        Namespace::Snowflake(s) => {
            let g = s.generator();
            let l = g.layout();
            let spec = l.spec();
            let end = SystemTime::UNIX_EPOCH + Duration::from_nanos(l.end_of_time_nanos());
            json!({
                "namespace": name, "kind": "snowflake",
                "settings": {
                    "worker": g.node(),
                    "layout": {
                        "timestamp_bits": spec.timestamp_bits, "node_bits": spec.node_bits,
                        "sequence_bits": spec.sequence_bits,
                        "time_unit": humantime::format_duration(spec.time_unit).to_string(),
                        "epoch": rfc3339(SystemTime::UNIX_EPOCH + Duration::from_millis(spec.epoch_unix_ms)),
                        "epoch_unix_ms": spec.epoch_unix_ms,
                        "order": match spec.order { idmint_core::FieldOrder::NodeThenSequence => "node_then_sequence", idmint_core::FieldOrder::SequenceThenNode => "sequence_then_node" },
                    },
                },
                "state": {
                    "ids_served": s.served(),
                    "last_timestamp": g.last_timestamp(),
                    "time_runs_out": rfc3339(end),
                },
            })
        }
        Namespace::Uuid7(..) | Namespace::Ulid(..) => {
            json!({ "namespace": name, "kind": ns.kind() })
        }
    }
}

async fn list_namespaces(State(node): State<Arc<Node>>) -> Response {
    let list: Vec<Value> = node.all().iter().map(|ns| namespace_info(ns)).collect();
    axum::Json(json!({ "namespaces": list })).into_response()
}

async fn get_namespace(State(node): State<Arc<Node>>, Path(name): Path<String>) -> Response {
    match node.namespace(&name).await {
        Ok(ns) => axum::Json(namespace_info(&ns)).into_response(),
        Err(e) => ApiError::from_id(&node, e).into_response(),
    }
}

async fn healthz() -> Response {
    axum::Json(json!({ "status": "ok" })).into_response()
}

async fn readyz(State(node): State<Arc<Node>>) -> Response {
    if node.is_draining() {
        return ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "shutting_down",
            message: "the node is shutting down".into(),
        }
        .into_response();
    }
    let authority = node.authority().clone();
    match tokio::time::timeout(Duration::from_secs(2), authority.list()).await {
        Ok(Ok(_)) => {
            axum::Json(json!({ "status": "ready", "authority": authority.kind() })).into_response()
        }
        Ok(Err(e)) => ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "authority_unavailable",
            message: format!("the {} authority is unavailable: {e}", authority.kind()),
        }
        .into_response(),
        Err(_) => ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "authority_unavailable",
            message: format!(
                "the {} authority did not answer within 2s",
                authority.kind()
            ),
        }
        .into_response(),
    }
}

async fn metrics(State(node): State<Arc<Node>>) -> Response {
    node.refresh_gauges();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        node.metrics().encode(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn count_parsing() {
        assert_eq!(parse_count(None, 10), Ok(1));
        assert_eq!(parse_count(Some("count=7"), 10), Ok(7));
        assert_eq!(
            parse_count(Some("count=0"), 10).unwrap_err().code(),
            "invalid_count"
        );
        assert_eq!(
            parse_count(Some("count=11"), 10).unwrap_err().code(),
            "invalid_count"
        );
        assert_eq!(
            parse_count(Some("count=-1"), 10).unwrap_err().code(),
            "invalid_count"
        );
        assert_eq!(
            parse_count(Some("count=abc"), 10).unwrap_err().code(),
            "invalid_count"
        );
        assert_eq!(
            parse_count(Some("cnt=1"), 10).unwrap_err().code(),
            "invalid_request"
        );
    }

    #[test]
    fn ids_json_is_valid_json() {
        let s = ids_json("photos", &Ids::Numbers(vec![1, u64::MAX]));
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["ids"][1], "18446744073709551615");
        assert_eq!(v["namespace"], "photos");
    }
}
